//! A job's parameters (`params = ["DATE"]`, or
//! `params = { DATE = { default = "…", pattern = "…" } }`): what a trigger
//! may pass to a run as environment variables, and the one check of what it
//! passes, made by the engine so that the CLI, a raw socket request and a
//! user's request are refused alike.
//!
//! Names are environment variable names (`[A-Za-z_][A-Za-z0-9_]*`) that do
//! not touch what rea, the shell or the loader rely on ([`name_problem`]).
//! A run gets its trigger's values, else the defaults; a parameter without
//! a default is unset in a run that did not pass it (a scheduled or
//! dependent run: `rea check` warns).

use std::collections::BTreeMap;
use std::sync::Arc;

/// Parameters a job declares, at most.
pub const MAX_PARAMS: usize = 32;
/// Bytes of a parameter's name, at most.
pub const MAX_NAME_BYTES: usize = 64;
/// Bytes of one value, at most.
pub const MAX_VALUE_BYTES: usize = 4096;
/// Bytes of a trigger's names and values together, at most.
pub const MAX_TOTAL_BYTES: usize = 16 * 1024;
/// Bytes of a pattern as written, at most.
pub const MAX_PATTERN_BYTES: usize = 1024;

/// Names no parameter may take: they would change how the run is started
/// or found (rea's own, the owner's identity, the shell's and the
/// loader's behaviour), whatever the job's owner intends.
const RESERVED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "MAILTO",
    "IFS",
    "ENV",
    "BASH_ENV",
    "CDPATH",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "GLOBIGNORE",
];
/// Prefixes no parameter may take: rea's variables, the dynamic loader's.
const RESERVED_PREFIXES: &[&str] = &["REA_", "LD_"];

/// The values a run gets, by name.
pub type Values = BTreeMap<String, String>;

/// One declared parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    /// What a run gets when its trigger does not pass it.
    pub default: Option<String>,
    /// The whole value must match it.
    pub pattern: Option<Pattern>,
}

/// A value's pattern: a regular expression (regex-lite's syntax, linear
/// time) the whole value must match, as if written `^(?:…)$`.
#[derive(Debug, Clone)]
pub struct Pattern {
    source: String,
    regex: Arc<regex_lite::Regex>,
}

impl Pattern {
    /// Compiles `source`; the error says why it is not a pattern.
    pub fn new(source: &str) -> Result<Pattern, String> {
        if source.len() > MAX_PATTERN_BYTES {
            return Err(format!(
                "the pattern is {} bytes long, more than {MAX_PATTERN_BYTES}",
                source.len()
            ));
        }
        let regex = regex_lite::Regex::new(&format!("^(?:{source})$")).map_err(|e| {
            // regex-lite's message is several lines with a caret; its
            // last line says what is wrong.
            let text = e.to_string();
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid pattern")
                .trim()
                .trim_start_matches("error: ")
                .to_string()
        })?;
        Ok(Pattern {
            source: source.to_string(),
            regex: Arc::new(regex),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn matches(&self, value: &str) -> bool {
        self.regex.is_match(value)
    }
}

/// Patterns are equal as written (a reload compares jobs).
impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

/// Why `name` cannot be a parameter, phrased for a person; None if it can.
pub fn name_problem(name: &str) -> Option<String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Some(format!(
            "{name:?} is not an environment variable name (letters, digits and \"_\", not starting with a digit)"
        ));
    }
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "the name {name:?} is longer than {MAX_NAME_BYTES} bytes"
        ));
    }
    let upper = name.to_ascii_uppercase();
    if RESERVED.contains(&upper.as_str()) {
        return Some(format!(
            "{name:?} is set by rea or the shell for every run and cannot be a parameter"
        ));
    }
    if let Some(p) = RESERVED_PREFIXES.iter().find(|p| upper.starts_with(*p)) {
        return Some(format!(
            "names starting with {p:?} are reserved (rea's own variables, the loader's)"
        ));
    }
    None
}

/// Why `value` cannot be a value of `name` (declared as `param`), or None.
pub fn value_problem(param: &Param, value: &str) -> Option<String> {
    if value.len() > MAX_VALUE_BYTES {
        return Some(format!(
            "the value of {:?} is {} bytes long, more than {MAX_VALUE_BYTES}",
            param.name,
            value.len()
        ));
    }
    if value.contains('\0') {
        return Some(format!(
            "the value of {:?} contains a NUL character",
            param.name
        ));
    }
    match &param.pattern {
        Some(p) if !p.matches(value) => Some(format!(
            "{}={value:?} does not match its pattern {:?}",
            param.name,
            p.as_str()
        )),
        _ => None,
    }
}

/// The values a run that passes none gets: each default.
pub fn defaults(declared: &[Param]) -> Values {
    declared
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.default.clone()?)))
        .collect()
}

/// A trigger's `given` values checked against what the job `declared`,
/// with the defaults of those it does not pass; the error is one line for
/// the person who triggered (every problem, joined).
pub fn resolve(declared: &[Param], given: &Values, job: &str) -> Result<Values, String> {
    let mut problems = Vec::new();
    let total: usize = given.iter().map(|(k, v)| k.len() + v.len()).sum();
    if given.len() > MAX_PARAMS || total > MAX_TOTAL_BYTES {
        return Err(format!(
            "{} parameters of {total} bytes: at most {MAX_PARAMS} and {MAX_TOTAL_BYTES} bytes are passed to a run",
            given.len()
        ));
    }
    for name in given.keys() {
        if declared.iter().any(|p| &p.name == name) {
            continue;
        }
        let problem = if declared.is_empty() {
            format!("job {job:?} declares no parameters, so {name:?} cannot be passed")
        } else {
            let known: Vec<&str> = declared.iter().map(|p| p.name.as_str()).collect();
            let hint = crate::suggest::did_you_mean(name, known.iter().copied())
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            format!(
                "job {job:?} has no parameter {name:?} (it declares {}){hint}",
                known.join(", ")
            )
        };
        problems.push(problem);
    }
    let mut values = Values::new();
    for p in declared {
        match given.get(&p.name).or(p.default.as_ref()) {
            Some(v) => {
                if let Some(problem) = value_problem(p, v) {
                    problems.push(problem);
                }
                values.insert(p.name.clone(), v.clone());
            }
            None => problems.push(format!(
                "parameter {:?} is required (it has no default): pass --param {}=VALUE",
                p.name, p.name
            )),
        }
    }
    if problems.is_empty() {
        Ok(values)
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, default: Option<&str>, pattern: Option<&str>) -> Param {
        Param {
            name: name.into(),
            default: default.map(Into::into),
            pattern: pattern.map(|p| Pattern::new(p).unwrap()),
        }
    }

    fn given(pairs: &[(&str, &str)]) -> Values {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn values_are_checked_whole_and_defaults_fill_in() {
        let declared = [
            param("DATE", None, Some("[0-9]{4}-[0-9]{2}-[0-9]{2}")),
            param("REGION", Some("eu"), None),
        ];
        assert_eq!(
            resolve(&declared, &given(&[("DATE", "2026-11-30")]), "report"),
            Ok(given(&[("DATE", "2026-11-30"), ("REGION", "eu")]))
        );
        assert_eq!(
            resolve(&declared, &given(&[("DATE", "x2026-11-30")]), "report").unwrap_err(),
            "DATE=\"x2026-11-30\" does not match its pattern \"[0-9]{4}-[0-9]{2}-[0-9]{2}\""
        );
        assert_eq!(
            resolve(&declared, &given(&[]), "report").unwrap_err(),
            "parameter \"DATE\" is required (it has no default): pass --param DATE=VALUE"
        );
        assert_eq!(
            resolve(
                &declared,
                &given(&[("DATE", "2026-11-30"), ("REGOIN", "us")]),
                "report"
            )
            .unwrap_err(),
            "job \"report\" has no parameter \"REGOIN\" (it declares DATE, REGION); did you mean \"REGION\"?"
        );
        assert!(resolve(&[], &given(&[("X", "1")]), "j")
            .unwrap_err()
            .contains("declares no parameters"));
        assert_eq!(defaults(&declared), given(&[("REGION", "eu")]));
    }

    #[test]
    fn sizes_are_bounded() {
        let declared = [param("A", None, None)];
        let long = "x".repeat(MAX_VALUE_BYTES + 1);
        assert!(resolve(&declared, &given(&[("A", &long)]), "j")
            .unwrap_err()
            .contains("more than 4096"));
        let many: Values = (0..=MAX_PARAMS)
            .map(|i| (format!("P{i}"), String::new()))
            .collect();
        assert!(resolve(&declared, &many, "j")
            .unwrap_err()
            .starts_with("33 parameters"));
    }

    #[test]
    fn names_are_plain_and_not_reserved() {
        assert_eq!(name_problem("DATE"), None);
        assert_eq!(name_problem("_x1"), None);
        for bad in ["", "1A", "A-B", "A=B", "Ä"] {
            assert!(name_problem(bad)
                .unwrap()
                .contains("not an environment variable name"));
        }
        for reserved in [
            "PATH",
            "path",
            "HOME",
            "REA_JOB",
            "rea_x",
            "LD_PRELOAD",
            "IFS",
        ] {
            assert!(name_problem(reserved).is_some(), "{reserved}");
        }
    }

    #[test]
    fn a_bad_pattern_says_why_in_one_line() {
        let e = Pattern::new("[0-9").unwrap_err();
        assert!(!e.contains('\n') && !e.is_empty(), "{e}");
        assert!(Pattern::new("a|b").unwrap().matches("b"));
        assert!(!Pattern::new("a|b").unwrap().matches("ab"));
    }
}
