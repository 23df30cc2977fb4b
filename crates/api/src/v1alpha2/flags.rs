//! Manager flags as the other operator writes them: free-form flag keys, one value per flag,
//! and Go durations.

use std::collections::BTreeMap;

use super::ConversionError;

// A free-form flag key as the other operator writes it ("--name" or "-name") → "name".
pub(super) fn flag_name(field: &str, key: &str) -> Result<String, ConversionError> {
    let Some(stripped) = key.strip_prefix('-') else {
        return Err(ConversionError::NotAFlag {
            field: field.to_string(),
            key: key.to_string(),
        });
    };
    let name = stripped.trim_start_matches('-');
    if name.is_empty() || name.contains('=') || name.contains(char::is_whitespace) {
        return Err(ConversionError::InvalidFlagName {
            field: field.to_string(),
            key: key.to_string(),
        });
    }
    Ok(name.to_string())
}

// Flags by name without dashes. Setting one twice to different values is an error.
#[derive(Default)]
pub(super) struct Flags(pub(super) BTreeMap<String, String>);

impl Flags {
    pub(super) fn insert(
        &mut self,
        field: &str,
        name: String,
        value: String,
    ) -> Result<(), ConversionError> {
        match self.0.get(&name) {
            Some(first) if *first != value => Err(ConversionError::ConflictingFlag {
                field: field.to_string(),
                flag: name,
                first: first.clone(),
                second: value,
            }),
            Some(_) => Ok(()),
            None => {
                self.0.insert(name, value);
                Ok(())
            }
        }
    }
}

// A Go duration rounded to whole seconds, as the other operator renders durations into flags.
pub(super) fn whole_seconds(field: &str, value: &str) -> Result<i64, ConversionError> {
    let nanos = parse_go_duration(value).map_err(|reason| ConversionError::InvalidDuration {
        field: field.to_string(),
        value: value.to_string(),
        reason,
    })?;
    // Rounds half away from zero, as Go's Duration.Round does; |nanos| < 2^63 fits.
    Ok((nanos / 1e9).round() as i64)
}

/// Parses a duration in Go's `time.ParseDuration` syntax (as `metav1.Duration` fields are
/// written: "90s", "1m30s", "1.5h", "300ms", "-2s", "0"), returning nanoseconds.
pub fn parse_go_duration(text: &str) -> Result<f64, String> {
    let mut s = text;
    let negative = match s.as_bytes().first() {
        Some(&b'-') => {
            s = &s[1..];
            true
        }
        Some(&b'+') => {
            s = &s[1..];
            false
        }
        _ => false,
    };
    if s == "0" {
        return Ok(0.0);
    }
    if s.is_empty() {
        return Err("empty".into());
    }
    let mut total = 0.0_f64;
    while !s.is_empty() {
        let int_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let int_part = &s[..int_end];
        s = &s[int_end..];
        let mut frac_part = "";
        if let Some(rest) = s.strip_prefix('.') {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            frac_part = &rest[..end];
            s = &rest[end..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err("expected a number".into());
        }
        let unit_end = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        let unit = &s[..unit_end];
        s = &s[unit_end..];
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err("a unit (ns, us, ms, s, m, h) is missing".into()),
            other => return Err(format!("unknown unit {other:?}")),
        };
        let number: f64 = format!(
            "{}.{}",
            if int_part.is_empty() { "0" } else { int_part },
            if frac_part.is_empty() { "0" } else { frac_part }
        )
        .parse()
        .map_err(|e| format!("{e}"))?;
        total += number * scale;
    }
    // Go's durations are int64 nanoseconds.
    if total >= 9.223_372_036_854_776e18 {
        return Err("longer than Go's longest duration (about 292 years)".into());
    }
    Ok(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let secs = |s: &str| parse_go_duration(s).map(|n| n / 1e9);
        assert_eq!(secs("500s"), Ok(500.0));
        assert_eq!(secs("10m"), Ok(600.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("1.5h"), Ok(5400.0));
        assert_eq!(secs("0"), Ok(0.0));
        assert_eq!(secs("-2s"), Ok(-2.0));
        assert_eq!(secs("300ms"), Ok(0.3));
        assert_eq!(secs(".5s"), Ok(0.5));
        assert_eq!(secs("2\u{b5}s").map(|s| (s * 1e6).round()), Ok(2.0));
        for bad in ["", "10", "s", "5x", "1.s.", "-", "1h-2m", "99999999999h"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(whole_seconds("f", "1500ms"), Ok(2));
        assert_eq!(whole_seconds("f", "1499ms"), Ok(1));
        assert_eq!(whole_seconds("f", "400ms"), Ok(0));
    }

    #[test]
    fn flag_keys() {
        assert_eq!(flag_name("f", "--a-b"), Ok("a-b".to_string()));
        assert_eq!(flag_name("f", "-v"), Ok("v".to_string()));
        assert!(matches!(
            flag_name("f", "exampleArg"),
            Err(ConversionError::NotAFlag { .. })
        ));
        for bad in ["--", "-", "--a=b", "--a b"] {
            assert!(
                matches!(
                    flag_name("f", bad),
                    Err(ConversionError::InvalidFlagName { .. })
                ),
                "{bad}"
            );
        }
    }
}
