//! CRD names as Cluster API's `contract.CalculateCRDName` computes them (flect's pluralization
//! of the lower-cased kind, then the group), and the check that a release's CRDs follow it.

use serde_json::Value;

use super::{
    Finding, SKIP_CRD_NAME_CHECK_ANNOTATION, Severity,
    crd::{crd_group, crd_kind, crd_name, crds},
    finding,
};

// flect's dictionary (v1.0): singular, plural, alternative plural, unidirectional, exact.
// Uncountable words are listed with plural == singular.
struct Word {
    singular: &'static str,
    plural: &'static str,
    alternative: &'static str,
    unidirectional: bool,
    exact: bool,
}

const fn w(singular: &'static str, plural: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative: "",
        unidirectional: false,
        exact: false,
    }
}

const fn wa(singular: &'static str, plural: &'static str, alternative: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative,
        unidirectional: false,
        exact: false,
    }
}

const fn wu(singular: &'static str, plural: &'static str, alternative: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative,
        unidirectional: true,
        exact: false,
    }
}

const fn wx(singular: &'static str, plural: &'static str) -> Word {
    Word {
        singular,
        plural,
        alternative: "",
        unidirectional: false,
        exact: true,
    }
}

const DICTIONARY: &[Word] = &[
    w("aircraft", "aircraft"),
    wa("beef", "beef", "beefs"),
    w("bison", "bison"),
    wu("blues", "blues", ""),
    w("chassis", "chassis"),
    w("deer", "deer"),
    wa("fish", "fish", "fishes"),
    w("moose", "moose"),
    w("police", "police"),
    wa("salmon", "salmon", "salmons"),
    w("series", "series"),
    w("sheep", "sheep"),
    wa("shrimp", "shrimp", "shrimps"),
    w("species", "species"),
    wa("swine", "swine", "swines"),
    wa("trout", "trout", "trouts"),
    wa("tuna", "tuna", "tunas"),
    w("you", "you"),
    w("child", "children"),
    wx("ox", "oxen"),
    w("foot", "feet"),
    w("goose", "geese"),
    w("man", "men"),
    w("human", "humans"),
    wx("louse", "lice"),
    w("mouse", "mice"),
    w("tooth", "teeth"),
    w("woman", "women"),
    wx("die", "dice"),
    w("person", "people"),
    wa("adieu", "adieux", "adieus"),
    w("fabliau", "fabliaux"),
    wa("bureau", "bureaus", "bureaux"),
    w("criterion", "criteria"),
    wa("ganglion", "ganglia", "ganglions"),
    wa("lexicon", "lexica", "lexicons"),
    wa("mitochondrion", "mitochondria", "mitochondrions"),
    w("noumenon", "noumena"),
    w("phenomenon", "phenomena"),
    w("taxon", "taxa"),
    w("media", "media"),
    wu("medium", "media", "mediums"),
    wa("stadium", "stadiums", "stadia"),
    wa("aquarium", "aquaria", "aquariums"),
    wa("auditorium", "auditoria", "auditoriums"),
    wa("symposium", "symposia", "symposiums"),
    wa("curriculum", "curriculums", "curricula"),
    w("quota", "quotas"),
    wa("alumnus", "alumni", "alumnuses"),
    w("bacillus", "bacilli"),
    wa("cactus", "cacti", "cactuses"),
    w("coccus", "cocci"),
    wa("focus", "foci", "focuses"),
    wa("locus", "loci", "locuses"),
    wa("nucleus", "nuclei", "nucleuses"),
    wa("octopus", "octupuses", "octopi"),
    wa("radius", "radii", "radiuses"),
    w("syllabus", "syllabi"),
    wa("corpus", "corpora", "corpuses"),
    w("genus", "genera"),
    w("alumna", "alumnae"),
    w("vertebra", "vertebrae"),
    w("differentia", "differentiae"),
    w("minutia", "minutiae"),
    w("vita", "vitae"),
    w("larva", "larvae"),
    w("postcava", "postcavae"),
    w("praecava", "praecavae"),
    w("uva", "uvae"),
    wa("apex", "apices", "apexes"),
    wa("codex", "codices", "codexes"),
    wa("index", "indices", "indexes"),
    wa("latex", "latices", "latexes"),
    wa("vertex", "vertices", "vertexes"),
    wa("vortex", "vortices", "vortexes"),
    wa("appendix", "appendices", "appendixes"),
    wa("radix", "radices", "radixes"),
    wa("helix", "helices", "helixes"),
    wx("axis", "axes"),
    w("crisis", "crises"),
    wu("ellipsis", "ellipses", ""),
    w("genesis", "geneses"),
    w("oasis", "oases"),
    w("thesis", "theses"),
    w("testis", "testes"),
    w("base", "bases"),
    wu("basis", "bases", ""),
    wx("alias", "aliases"),
    w("vedalia", "vedalias"),
    wx("use", "uses"),
    w("abuse", "abuses"),
    w("cause", "causes"),
    w("clause", "clauses"),
    w("cruse", "cruses"),
    w("excuse", "excuses"),
    w("fuse", "fuses"),
    w("house", "houses"),
    w("misuse", "misuses"),
    w("muse", "muses"),
    w("pause", "pauses"),
    w("ache", "aches"),
    w("topaz", "topazes"),
    wa("buffalo", "buffaloes", "buffalos"),
    w("potato", "potatoes"),
    w("tomato", "tomatoes"),
    w("equipment", "equipment"),
    w("information", "information"),
    w("jeans", "jeans"),
    w("money", "money"),
    w("news", "news"),
    w("rice", "rice"),
    wa("dwarf", "dwarfs", "dwarves"),
    wa("hoof", "hoofs", "hooves"),
    w("thief", "thieves"),
    w("chive", "chives"),
    w("hive", "hives"),
    w("move", "moves"),
    w("movie", "movies"),
    w("cookie", "cookies"),
    w("pretorium", "pretoriums"),
    w("agenda", "agendas"),
    wa("formula", "formulas", "formulae"),
    w("shoe", "shoes"),
    wx("toe", "toes"),
    w("graffiti", "graffiti"),
    wx("ID", "IDs"),
];

// flect's suffix rules, in priority order (singular suffix, plural suffix).
const SUFFIXES: &[(&str, &str)] = &[
    ("tive", "tives"),
    ("eaf", "eaves"),
    ("oaf", "oaves"),
    ("afe", "aves"),
    ("arf", "arves"),
    ("rfe", "rves"),
    ("rf", "rves"),
    ("lf", "lves"),
    ("fe", "ves"),
    ("ay", "ays"),
    ("ey", "eys"),
    ("oy", "oys"),
    ("quy", "quies"),
    ("uy", "uys"),
    ("y", "ies"),
    ("eau", "eaux"),
    ("bula", "bulae"),
    ("dula", "bulae"),
    ("lula", "bulae"),
    ("nula", "bulae"),
    ("vula", "bulae"),
    ("hedron", "hedra"),
    ("ium", "ia"),
    ("seum", "seums"),
    ("eum", "ea"),
    ("oum", "oa"),
    ("stracum", "straca"),
    ("dum", "da"),
    ("elum", "ela"),
    ("ilum", "ila"),
    ("olum", "ola"),
    ("ulum", "ula"),
    ("llum", "lla"),
    ("ylum", "yla"),
    ("imum", "ima"),
    ("ernum", "erna"),
    ("gnum", "gna"),
    ("brum", "bra"),
    ("crum", "cra"),
    ("terum", "tera"),
    ("serum", "sera"),
    ("trum", "tra"),
    ("antum", "anta"),
    ("atum", "ata"),
    ("entum", "enta"),
    ("etum", "eta"),
    ("itum", "ita"),
    ("otum", "ota"),
    ("utum", "uta"),
    ("ctum", "cta"),
    ("ovum", "ova"),
    ("trix", "trices"),
    ("iasis", "iases"),
    ("mesis", "meses"),
    ("kinesis", "kineses"),
    ("resis", "reses"),
    ("gnosis", "gnoses"),
    ("opsis", "opses"),
    ("ysis", "yses"),
    ("ouse", "ouses"),
    ("lause", "lauses"),
    ("us", "uses"),
    ("ch", "ches"),
    ("io", "ios"),
    ("sh", "shes"),
    ("ss", "sses"),
    ("ez", "ezzes"),
    ("iz", "izzes"),
    ("tz", "tzes"),
    ("zz", "zzes"),
    ("ano", "anos"),
    ("lo", "los"),
    ("to", "tos"),
    ("oo", "oos"),
    ("o", "oes"),
    ("x", "xes"),
    ("S", "Ses"),
];

/// The plural of a single word, as `github.com/gobuffalo/flect` v1 computes it (the
/// pluralization Kubernetes tooling and Cluster API use for resource names): whole-word
/// dictionary entries first, then suffix rules (dictionary words as suffixes, in reverse order,
/// then the irregular suffixes), then "s" unless the word already ends in "s".
pub fn pluralize(word: &str) -> String {
    if word.is_empty() {
        return String::new();
    }
    if let Some(d) = DICTIONARY.iter().find(|d| d.singular == word) {
        return d.plural.to_string();
    }
    let is_plural = |s: &str| {
        DICTIONARY.iter().any(|d| {
            !d.unidirectional
                && (d.plural == s || (!d.alternative.is_empty() && d.alternative == s))
        })
    };
    if is_plural(word) {
        return word.to_string();
    }
    let lower = word.to_lowercase();
    if is_plural(&lower) {
        return word.to_string();
    }
    if let Some(d) = DICTIONARY.iter().find(|d| d.singular == lower) {
        return replace_suffix(word, word.len(), d.plural);
    }
    let dict_rules = DICTIONARY
        .iter()
        .rev()
        .filter(|d| !d.exact)
        .map(|d| (d.singular, d.plural));
    for (singular, plural) in dict_rules.chain(SUFFIXES.iter().copied()) {
        if word.ends_with(plural) {
            return word.to_string();
        }
        if word.ends_with(singular) {
            return replace_suffix(word, singular.len(), plural);
        }
    }
    if lower.ends_with('s') {
        return word.to_string();
    }
    format!("{word}s")
}

fn replace_suffix(word: &str, suffix_len: usize, with: &str) -> String {
    let keep = word.len().saturating_sub(suffix_len);
    format!("{}{with}", word.get(..keep).unwrap_or(""))
}

/// The CRD name Cluster API expects for `kind` in `group`
/// (`contract.CalculateCRDName`): the flect plural of the lower-cased kind, a dot, the group.
pub fn calculate_crd_name(group: &str, kind: &str) -> String {
    format!("{}.{group}", pluralize(&kind.to_lowercase()))
}

pub(super) fn check_crd_names(objects: &[Value], out: &mut Vec<Finding>) {
    let mut any = false;
    for crd in crds(objects) {
        any = true;
        let (name, group, kind) = (crd_name(crd), crd_group(crd), crd_kind(crd));
        let want = calculate_crd_name(group, kind);
        let skipped = crd
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(SKIP_CRD_NAME_CHECK_ANNOTATION))
            .is_some();
        if name == want {
            out.push(finding(
                Severity::Ok,
                "crd-name",
                format!("{name} (kind {kind})"),
            ));
        } else if skipped {
            out.push(finding(
                Severity::Warning,
                "crd-name",
                format!(
                    "{name} should be {want} for kind {kind}; the check is skipped by the {SKIP_CRD_NAME_CHECK_ANNOTATION} annotation"
                ),
            ));
        } else {
            out.push(finding(
                Severity::Error,
                "crd-name",
                format!(
                    "{name} should be {want}: Cluster API finds the CRD of kind {kind} in group {group} by that name (contract.CalculateCRDName)"
                ),
            ));
        }
    }
    if !any {
        out.push(finding(
            Severity::Warning,
            "crd-name",
            "the release defines no CustomResourceDefinition",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flect_plurals_of_provider_kinds() {
        for (kind, plural) in [
            ("awscluster", "awsclusters"),
            ("awsclusterstaticidentity", "awsclusterstaticidentities"),
            ("ipaddress", "ipaddresses"),
            ("ipaddressclaim", "ipaddressclaims"),
            ("kubeadmconfig", "kubeadmconfigs"),
            ("machinepolicy", "machinepolicies"),
            ("dockermachinepool", "dockermachinepools"),
            ("vspherevm", "vspherevms"),
            ("clusterclass", "clusterclasses"),
            ("extensionconfig", "extensionconfigs"),
            ("status", "statuses"),
            ("index", "indices"),
            ("fooindex", "fooindices"),
            ("matrix", "matrices"),
            ("person", "people"),
            ("salesperson", "salespeople"),
            ("series", "series"),
            ("news", "news"),
            ("leaf", "leaves"),
            ("knife", "knives"),
            ("day", "days"),
            ("potato", "potatoes"),
            ("photo", "photos"),
            ("box", "boxes"),
            ("bus", "buses"),
            ("datum", "data"),
            ("criterion", "criteria"),
            ("machines", "machines"),
            ("", ""),
        ] {
            assert_eq!(pluralize(kind), plural, "{kind}");
        }
        assert_eq!(
            calculate_crd_name(
                "infrastructure.cluster.x-k8s.io",
                "AWSClusterStaticIdentity"
            ),
            "awsclusterstaticidentities.infrastructure.cluster.x-k8s.io"
        );
        assert_eq!(
            calculate_crd_name("cluster.x-k8s.io", "ClusterClass"),
            "clusterclasses.cluster.x-k8s.io"
        );
    }
}
