//! Quantities as people type them on the command line, in the API's units: CPU in thousandths of a
//! core, memory in MiB.

/// `2` or `0.5` cores, or `500m` thousandths of a core → thousandths.
pub fn parse_cpu_millis(text: &str) -> Result<u32, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a CPU amount: cores (2, 0.5) or thousandths of a core (500m)");
    if let Some(millis) = text.strip_suffix('m') {
        return millis.parse::<u32>().map_err(|_| bad());
    }
    let cores: f64 = text.parse().map_err(|_| bad())?;
    if !cores.is_finite() || cores < 0.0 || cores * 1000.0 > f64::from(u32::MAX) {
        return Err(bad());
    }
    let millis = (cores * 1000.0).round();
    if (millis - cores * 1000.0).abs() > 1e-6 {
        return Err(format!("{text:?}: CPU is counted in thousandths of a core"));
    }
    Ok(millis as u32)
}

/// `512` (MiB), `512Mi`, `512M`, `20Gi`, `20G`, `1Ti` → MiB.
pub fn parse_mib(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a size: MiB (512), or with a unit (512Mi, 20Gi, 1Ti)");
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let factor = match unit.to_ascii_lowercase().as_str() {
        "" | "m" | "mi" | "mb" | "mib" => 1,
        "g" | "gi" | "gb" | "gib" => 1024,
        "t" | "ti" | "tb" | "tib" => 1024 * 1024,
        _ => return Err(bad()),
    };
    number.checked_mul(factor).ok_or_else(bad)
}

/// `NAME=VALUE` → (NAME, VALUE).
pub fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_reads_cores_and_thousandths() {
        assert_eq!(parse_cpu_millis("2"), Ok(2000));
        assert_eq!(parse_cpu_millis("0.25"), Ok(250));
        assert_eq!(parse_cpu_millis("500m"), Ok(500));
        assert!(parse_cpu_millis("0.0001").unwrap_err().contains("thousandths"));
        for bad in ["", "two", "-1", "1e12", "NaN", "5 m", "m"] {
            assert!(parse_cpu_millis(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_are_mib_unless_a_unit_says_otherwise() {
        assert_eq!(parse_mib("512"), Ok(512));
        assert_eq!(parse_mib("512Mi"), Ok(512));
        assert_eq!(parse_mib("20Gi"), Ok(20 * 1024));
        assert_eq!(parse_mib("20G"), Ok(20 * 1024));
        assert_eq!(parse_mib("1Ti"), Ok(1024 * 1024));
        for bad in ["", "Gi", "1.5Gi", "20 parsecs", "-1", "99999999999999999999"] {
            assert!(parse_mib(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_needs_a_name_and_keeps_equals_in_the_value() {
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_env("EMPTY="), Ok(("EMPTY".into(), String::new())));
        assert!(parse_env("=x").is_err() && parse_env("novalue").is_err());
    }
}
