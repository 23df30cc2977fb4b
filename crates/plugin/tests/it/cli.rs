//! The plugin behaves like kubectl: `-o json|yaml` (an unknown format refused with kubectl's
//! words), shell completion, examples in every command's help, and its krew manifest.

use crate::support;

use serde_json::Value;
use support::*;

fn vendor_repository() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn verify_and_describe_print_json_and_yaml() -> TestResult {
    let repo = vendor_repository();
    for cmd in ["verify", "describe"] {
        let base = [
            cmd,
            "--repository",
            &repo,
            "--infrastructure",
            "vendor:v1.0.0",
        ];
        let json: Value =
            serde_json::from_str(&plugin_ok(None, &[&base[..], &["-o", "json"]].concat())?.stdout)?;
        let yaml = capi_yaml::parse_documents(
            &plugin_ok(None, &[&base[..], &["-o", "yaml"]].concat())?.stdout,
            &Default::default(),
        )?;
        assert_eq!(
            yaml,
            std::slice::from_ref(&json),
            "{cmd}: YAML and JSON differ"
        );
        assert_eq!(json[0]["kind"], "InfrastructureProvider", "{cmd}: {json}");
        assert_eq!(json[0]["version"], "v1.0.0", "{cmd}: {json}");
        if cmd == "verify" {
            assert_eq!(json[0]["errors"], 0, "{json}");
            assert!(
                json[0]["findings"].as_array().is_some_and(|f| f
                    .iter()
                    .any(|f| f["check"] == "infra-cluster-endpoint" && f["severity"] == "ok")),
                "{json}"
            );
        }
    }
    Ok(())
}

#[test]
fn an_unknown_output_format_is_refused_like_kubectl() -> TestResult {
    for cmd in [&["verify"][..], &["describe"], &["upgrade", "plan"]] {
        let r = plugin_env(None, &[cmd, &["-o", "xml"]].concat(), &[])?;
        assert!(!r.ok, "{}", r.all());
        assert!(
            r.stderr.contains(
                "unable to match a printer suitable for the output format \"xml\", allowed formats are: json, yaml"
            ),
            "{}",
            r.all()
        );
    }
    Ok(())
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish() -> TestResult {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef kubectl-capi_providers"),
        ("fish", "complete -c kubectl-capi_providers"),
    ] {
        let r = plugin_ok(None, &["completion", shell])?;
        assert!(r.stdout.contains(marker), "{shell}: {}", r.all());
        // Subcommands are completed.
        assert!(
            r.stdout.contains("describe") && r.stdout.contains("preload"),
            "{shell}"
        );
    }
    let bad = plugin_env(None, &["completion", "tcsh"], &[])?;
    assert!(
        !bad.ok && bad.stderr.contains("possible values"),
        "{}",
        bad.all()
    );
    Ok(())
}

/// `--help` of every command, as the binary prints it, ends with examples.
#[test]
fn every_command_help_shows_examples() -> TestResult {
    let commands: &[&[&str]] = &[
        &[],
        &["init"],
        &["upgrade"],
        &["upgrade", "plan"],
        &["upgrade", "apply"],
        &["preload"],
        &["migrate"],
        &["verify"],
        &["describe"],
        &["completion"],
        &["krew-manifest"],
    ];
    for c in commands {
        let r = plugin_ok(None, &[c, &["--help"][..]].concat())?;
        assert!(r.stdout.contains("Examples:\n  "), "{c:?}: {}", r.all());
    }
    Ok(())
}

#[test]
fn the_krew_manifest_describes_this_build() -> TestResult {
    let dir = TempDir::new("capi-plugin-krew")?;
    let linux = dir.0.join("linux.tar.gz");
    let windows = dir.0.join("windows.zip");
    // SHA-256 test vectors (FIPS 180-2): "abc" and the empty input.
    std::fs::write(&linux, "abc")?;
    std::fs::write(&windows, "")?;
    let r = plugin_ok(
        None,
        &[
            "krew-manifest",
            "--uri-template",
            "https://example.invalid/v{version}/kubectl-capi_providers-{os}-{arch}.tar.gz",
            "--archive",
            &format!("linux/amd64={}", linux.display()),
            "--archive",
            &format!("windows/amd64={}", windows.display()),
        ],
    )?;
    let docs = capi_yaml::parse_documents(&r.stdout, &Default::default())?;
    let [m] = docs.as_slice() else {
        return Err(format!("not one document: {}", r.stdout).into());
    };
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(m["metadata"]["name"], "capi-providers");
    assert_eq!(m["spec"]["version"], format!("v{version}"));
    for field in ["homepage", "shortDescription", "description"] {
        assert!(
            m["spec"][field].as_str().is_some_and(|s| !s.is_empty()),
            "{field}: {m}"
        );
    }
    let p = &m["spec"]["platforms"];
    assert_eq!(p[0]["selector"]["matchLabels"]["os"], "linux");
    assert_eq!(p[0]["selector"]["matchLabels"]["arch"], "amd64");
    assert_eq!(
        p[0]["uri"],
        format!("https://example.invalid/v{version}/kubectl-capi_providers-linux-amd64.tar.gz")
    );
    assert_eq!(
        p[0]["sha256"],
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        p[1]["sha256"],
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    // The binary krew installs is the one built here.
    let built = plugin_bin()
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("no binary name")?;
    assert_eq!(p[0]["bin"], built);
    assert_eq!(p[1]["bin"], format!("{built}.exe"));
    Ok(())
}

/// `move --to-directory` / `--from-directory` run clusterctl's backup and restore of the
/// cluster the plugin is pointed at (here a stand-in clusterctl recording its arguments), and
/// a failing clusterctl fails the command; the directory flags exclude `--to-kubeconfig`.
#[test]
fn move_backs_up_and_restores_through_clusterctl() -> TestResult {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("capi-plugin-move-dir")?;
    let record = dir.0.join("args");
    let fake = dir.0.join("clusterctl");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\n[ -z \"$FAIL\" ]\n",
            record.display()
        ),
    )?;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))?;
    let fake = fake.to_string_lossy().into_owned();
    let backup = dir.0.join("backup").to_string_lossy().into_owned();
    let to = plugin_ok(
        None,
        &[
            "--kubeconfig",
            "source.kubeconfig",
            "--context",
            "src",
            "move",
            "--to-directory",
            &backup,
            "-n",
            "team-a",
            "--clusterctl",
            &fake,
        ],
    )?;
    assert!(to.stdout.contains("backed up to"), "{}", to.all());
    let from = plugin_ok(
        None,
        &["move", "--from-directory", &backup, "--clusterctl", &fake],
    )?;
    assert!(from.stdout.contains("restored from"), "{}", from.all());
    assert_eq!(
        std::fs::read_to_string(&record)?,
        format!(
            "move --to-directory {backup} -n team-a --kubeconfig source.kubeconfig --kubeconfig-context src\nmove --from-directory {backup}\n"
        )
    );
    let failed = plugin_env(
        None,
        &["move", "--from-directory", &backup, "--clusterctl", &fake],
        &[("FAIL", "1")],
    )?;
    assert!(
        !failed.ok && failed.stderr.contains("clusterctl move failed"),
        "{}",
        failed.all()
    );
    let both = plugin_env(
        None,
        &[
            "move",
            "--to-directory",
            &backup,
            "--to-kubeconfig",
            "t.kubeconfig",
        ],
        &[],
    )?;
    assert!(
        !both.ok && both.stderr.contains("cannot be used with"),
        "{}",
        both.all()
    );
    let neither = plugin_env(None, &["move"], &[])?;
    assert!(
        !neither.ok && neither.stderr.contains("--to-kubeconfig"),
        "{}",
        neither.all()
    );
    Ok(())
}
