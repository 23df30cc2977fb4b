//! clusterctl's `SimpleProcessor`: variable listing and `Process`.

use std::collections::BTreeMap;

use crate::error::Error;
use crate::eval::Limits;
use crate::legacy;
use crate::parse::{Node, Template, parse};

/// A variable referenced by a template, as clusterctl's `GetVariableMap` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    /// The variable name.
    pub name: String,
    /// The default clusterctl derives from the expression's arguments, `None` if empty (the variable is
    /// then required). See [`variables`] for how it is built.
    pub default: Option<String>,
}

impl Variable {
    /// Whether clusterctl requires a value for this variable (it has no default).
    pub fn is_required(&self) -> bool {
        self.default.is_none()
    }
}

/// Lists the variables of a template the way clusterctl does (`GetVariables` / `GetVariableMap`).
///
/// The text is legacy-converted ([`crate::convert_legacy_vars`]) and parsed, then:
/// * only top-level expressions count; names used inside another expression's arguments are not listed
///   (`${A:=${B}}` lists `A` only);
/// * the first occurrence of a name in the text decides its default;
/// * the default is the concatenation of the expression's arguments, a text argument as written and a nested
///   expression as `${NAME}` whatever its operation; an empty concatenation means no default. So `${X:=}` and
///   `${#X}` are required, `${X:=""}` defaults to the two characters `""`, and any operation with arguments
///   counts as having a default (`${X:5}` → `5`, `${X/a/b}` → `ab`).
///
/// The result is sorted by name (byte order), each name once.
///
/// # Errors
///
/// Any error of [`crate::parse`]; offsets refer to `input`.
pub fn variables(input: &str) -> Result<Vec<Variable>, Error> {
    let template = parse_converted(input)?;
    Ok(variable_map(&template)
        .into_iter()
        .map(|(name, default)| Variable {
            name: name.to_owned(),
            default,
        })
        .collect())
}

/// Substitutes variables like clusterctl's `SimpleProcessor.Process`.
///
/// 1. Legacy `${ VAR }` references are normalised and the text is parsed.
/// 2. Every variable listed by [`variables`] that has no default must be set: `lookup` returns `None` for an
///    unset variable and `Some("")` for one that is set but empty (which counts as set).
/// 3. The text is expanded with unset variables, including ones nested in defaults, treated as empty.
///
/// On error clusterctl returns the input unchanged; here the caller simply keeps using `input`.
///
/// # Errors
///
/// [`Error::MissingVariables`] naming every unset variable without a default (sorted), any error of
/// [`crate::parse`] (offsets refer to `input`), and the evaluation limits of [`Template::eval`].
pub fn process(input: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, Error> {
    process_with(input, lookup, &Limits::default())
}

/// [`process`] within `limits`: the expansion is checked while it is built, so a template that would
/// expand beyond them fails ([`Error::OutputTooLarge`], [`Error::ValueTooLarge`]) having produced at
/// most that much text.
///
/// # Errors
///
/// Those of [`process`].
pub fn process_with(
    input: &str,
    lookup: impl Fn(&str) -> Option<String>,
    limits: &Limits,
) -> Result<String, Error> {
    let template = parse_converted(input)?;
    let missing: Vec<String> = variable_map(&template)
        .into_iter()
        .filter(|(name, default)| default.is_none() && lookup(name).is_none())
        .map(|(name, _)| name.to_owned())
        .collect();
    if !missing.is_empty() {
        return Err(Error::MissingVariables(missing));
    }
    template.eval_with(lookup, limits)
}

fn parse_converted(input: &str) -> Result<Template, Error> {
    let (converted, shifts) = legacy::convert(input);
    parse(&converted).map_err(|err| match err {
        Error::Parse { kind, offset } => Error::Parse {
            kind,
            offset: legacy::original_offset(&shifts, offset),
        },
        Error::NestingTooDeep { limit, offset } => Error::NestingTooDeep {
            limit,
            offset: legacy::original_offset(&shifts, offset),
        },
        other => other,
    })
}

/// clusterctl's `traverse`: top-level expressions only, first occurrence wins.
fn variable_map(template: &Template) -> BTreeMap<&str, Option<String>> {
    let mut map = BTreeMap::new();
    for node in template.nodes() {
        let Node::Func(func) = node else { continue };
        map.entry(func.param()).or_insert_with(|| {
            let mut default = String::new();
            for arg in func.args() {
                match arg {
                    Node::Text(text) => default.push_str(text),
                    Node::Func(nested) => {
                        default.push_str("${");
                        default.push_str(nested.param());
                        default.push('}');
                    }
                }
            }
            (!default.is_empty()).then_some(default)
        });
    }
    map
}
