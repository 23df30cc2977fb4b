//! `-o json|yaml`, as kubectl offers it: machine-readable output of the commands that print
//! results; without the flag they print their human-readable table or text.

use std::io::Write;

use serde_json::Value;

/// A machine-readable output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON document, indented.
    Json,
    /// One YAML document.
    Yaml,
}

/// The formats `-o` accepts, as kubectl lists them in its error.
const ALLOWED: &str = "json, yaml";

/// The `-o` flag.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputFlags {
    /// Output format: json or yaml (default: a human-readable table or text).
    #[arg(long, short = 'o', value_name = "FORMAT", value_parser = parse_format)]
    pub output: Option<Format>,
}

/// Reads `-o`'s value; an unknown format is refused with kubectl's words.
pub fn parse_format(s: &str) -> Result<Format, String> {
    match s {
        "json" => Ok(Format::Json),
        "yaml" => Ok(Format::Yaml),
        _ => Err(format!(
            "unable to match a printer suitable for the output format \"{s}\", allowed formats are: {ALLOWED}"
        )),
    }
}

/// Writes `value` on standard output in `format`; a closed output (`| head`) is not an error.
pub fn print(value: &Value, format: Format) -> anyhow::Result<()> {
    let mut text = match format {
        Format::Json => serde_json::to_string_pretty(value)?,
        Format::Yaml => capi_yaml::to_string(value)?,
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_json_and_yaml_only() {
        assert_eq!(parse_format("json"), Ok(Format::Json));
        assert_eq!(parse_format("yaml"), Ok(Format::Yaml));
        let err = parse_format("xml").err().unwrap_or_default();
        assert!(
            err.contains("unable to match a printer") && err.contains("json, yaml"),
            "{err}"
        );
    }
}
