//! Kubernetes labels and label selectors: syntax checks (keys, values), `matchLabels` +
//! `matchExpressions` evaluation, and the `kubectl -l` string form (`a=b,c!=d,e in (f,g),!h`).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A label map (key → value), as on a Kubernetes object's `metadata.labels`.
pub type Labels = BTreeMap<String, String>;

/// Why a label, a selector or a selector string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LabelError(pub String);

/// The operator of a `matchExpressions` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SelectorOp {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl SelectorOp {
    /// The Kubernetes spelling (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    pub fn as_str(self) -> &'static str {
        match self {
            SelectorOp::In => "In",
            SelectorOp::NotIn => "NotIn",
            SelectorOp::Exists => "Exists",
            SelectorOp::DoesNotExist => "DoesNotExist",
        }
    }

    /// Parse the Kubernetes spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "In" => SelectorOp::In,
            "NotIn" => SelectorOp::NotIn,
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            _ => return None,
        })
    }
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: SelectorOp,
    /// Values (In/NotIn: at least one; Exists/DoesNotExist: none).
    #[serde(default)]
    pub values: BTreeSet<String>,
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        let v = labels.get(&self.key);
        match self.op {
            SelectorOp::In => v.is_some_and(|v| self.values.contains(v)),
            SelectorOp::NotIn => v.is_none_or(|v| !self.values.contains(v)),
            SelectorOp::Exists => v.is_some(),
            SelectorOp::DoesNotExist => v.is_none(),
        }
    }
}

/// A Kubernetes label selector. The empty selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LabelSelector {
    /// `matchLabels`: each key must have exactly this value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// `matchExpressions`: every requirement must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    /// The selector that selects everything (`{}`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// A selector of `matchLabels` only.
    pub fn labels<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        LabelSelector {
            match_labels: pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether `labels` are selected.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// Check keys, values and operators; `field` names the selector in errors
    /// (e.g. `spec.podSelector`).
    pub fn validate(&self, field: &str) -> Result<(), LabelError> {
        for (k, v) in &self.match_labels {
            check_key(k).map_err(|e| LabelError(format!("{field}.matchLabels: {e}")))?;
            check_value(v).map_err(|e| LabelError(format!("{field}.matchLabels[{k:?}]: {e}")))?;
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let f = format!("{field}.matchExpressions[{i}]");
            check_key(&r.key).map_err(|e| LabelError(format!("{f}.key: {e}")))?;
            match r.op {
                SelectorOp::In | SelectorOp::NotIn if r.values.is_empty() => {
                    return Err(LabelError(format!(
                        "{f}.values: operator {} needs at least one value",
                        r.op.as_str()
                    )));
                }
                SelectorOp::Exists | SelectorOp::DoesNotExist if !r.values.is_empty() => {
                    return Err(LabelError(format!(
                        "{f}.values: operator {} takes no values",
                        r.op.as_str()
                    )));
                }
                _ => {}
            }
            for v in &r.values {
                check_value(v).map_err(|e| LabelError(format!("{f}.values: {e}")))?;
            }
        }
        Ok(())
    }

    /// Parse the `kubectl -l` form: comma-separated `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
    /// `k notin (a,b)`, `k` (exists), `!k` (does not exist). The empty string selects all.
    pub fn parse(s: &str) -> Result<Self, LabelError> {
        let mut sel = LabelSelector::default();
        for term in split_terms(s)? {
            let t = term.trim();
            if t.is_empty() {
                return Err(LabelError(format!("selector {s:?}: empty term")));
            }
            let req = parse_term(t).map_err(|e| LabelError(format!("selector {s:?}: {e}")))?;
            match req {
                Term::Equals(k, v) => {
                    if sel.match_labels.get(&k).is_some_and(|o| *o != v) {
                        // k=a,k=b selects nothing; keep it as an expression pair.
                        sel.match_expressions.push(Requirement {
                            key: k,
                            op: SelectorOp::In,
                            values: [v].into(),
                        });
                    } else {
                        sel.match_labels.insert(k, v);
                    }
                }
                Term::Req(r) => sel.match_expressions.push(r),
            }
        }
        sel.validate("selector")?;
        Ok(sel)
    }
}

impl fmt::Display for LabelSelector {
    /// The `kubectl -l` form; `<all>`-free: the empty selector prints as the empty string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &self.match_expressions {
            let vals = r.values.iter().cloned().collect::<Vec<_>>().join(",");
            parts.push(match r.op {
                SelectorOp::In => format!("{} in ({vals})", r.key),
                SelectorOp::NotIn => format!("{} notin ({vals})", r.key),
                SelectorOp::Exists => r.key.clone(),
                SelectorOp::DoesNotExist => format!("!{}", r.key),
            });
        }
        f.write_str(&parts.join(","))
    }
}

enum Term {
    Equals(String, String),
    Req(Requirement),
}

/// Split on commas that are not inside parentheses.
fn split_terms(s: &str) -> Result<Vec<&str>, LabelError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(LabelError(format!("selector {s:?}: unbalanced ')'")));
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(LabelError(format!("selector {s:?}: unbalanced '('")));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_term(t: &str) -> Result<Term, String> {
    if let Some(k) = t.strip_prefix('!') {
        return Ok(Term::Req(Requirement {
            key: k.trim().to_string(),
            op: SelectorOp::DoesNotExist,
            values: BTreeSet::new(),
        }));
    }
    if let Some((k, v)) = t.split_once("!=") {
        return Ok(Term::Req(Requirement {
            key: k.trim().to_string(),
            op: SelectorOp::NotIn,
            values: [v.trim().to_string()].into(),
        }));
    }
    if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
        return Ok(Term::Equals(k.trim().to_string(), v.trim().to_string()));
    }
    for (word, op) in [(" notin ", SelectorOp::NotIn), (" in ", SelectorOp::In)] {
        if let Some((k, rest)) = t.split_once(word) {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("{t:?}: values must be in parentheses: KEY{word}(A,B)"))?;
            let values: BTreeSet<String> = inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            return Ok(Term::Req(Requirement {
                key: k.trim().to_string(),
                op,
                values,
            }));
        }
    }
    if t.contains(|c: char| c.is_whitespace() || "()=!".contains(c)) {
        return Err(format!(
            "{t:?} is not KEY, !KEY, KEY=VALUE, KEY!=VALUE, KEY in (..) or KEY notin (..)"
        ));
    }
    Ok(Term::Req(Requirement {
        key: t.to_string(),
        op: SelectorOp::Exists,
        values: BTreeSet::new(),
    }))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// A label name part: 1–63 characters, alphanumerics, `-`, `_`, `.`, alphanumeric at both ends.
fn check_name(n: &str) -> Result<(), String> {
    let ok_ends = n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric());
    if n.is_empty() || n.len() > 63 || !ok_ends || !n.chars().all(is_name_char) {
        return Err(format!(
            "{n:?} is not a valid label name (1-63 characters: letters, digits, '-', '_', '.', \
             starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain of at most 253 characters.
pub fn check_key(k: &str) -> Result<(), String> {
    let name = match k.rsplit_once('/') {
        Some((prefix, name)) => {
            let dns_ok = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                        && l.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                });
            if !dns_ok {
                return Err(format!(
                    "label key {k:?}: prefix {prefix:?} is not a DNS subdomain"
                ));
            }
            name
        }
        None => k,
    };
    check_name(name).map_err(|e| format!("label key {k:?}: {e}"))
}

/// A label value: empty, or a valid label name.
pub fn check_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    check_name(v).map_err(|e| format!("label value {v:?}: {e}"))
}

/// Check every key and value of a label map; `what` names the object in errors.
pub fn check_labels(what: &str, labels: &Labels) -> Result<(), LabelError> {
    for (k, v) in labels {
        check_key(k).map_err(|e| LabelError(format!("{what}: {e}")))?;
        check_value(v).map_err(|e| LabelError(format!("{what}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parse_and_match_kubectl_forms() {
        let s =
            LabelSelector::parse("app=web, tier in (fe,be),!legacy,env!=prod,team").expect("parse");
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("team", "x")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db"), ("team", "x")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "fe"),
            ("team", "x"),
            ("legacy", "")
        ])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "fe"),
            ("team", "x"),
            ("env", "prod")
        ])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        let again = LabelSelector::parse(&s.to_string()).expect("reparse");
        assert_eq!(again, s);
        assert!(LabelSelector::parse("").expect("empty").is_empty());
        assert!(LabelSelector::everything().matches(&Labels::new()));
    }

    #[test]
    fn bad_syntax_is_refused_with_the_reason() {
        for bad in [
            "a=b,",
            "a in b",
            "a in (b",
            "-a=b",
            "a=b c",
            "a=-b",
            "UPPER.example.com/x=y",
        ] {
            let e = LabelSelector::parse(bad).expect_err(bad);
            assert!(e.0.contains("selector"), "{bad}: {e}");
        }
        assert!(check_key("example.com/app").is_ok());
        assert!(check_key(&"a".repeat(64)).is_err());
        let sel = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![Requirement {
                key: "a".into(),
                op: SelectorOp::In,
                values: BTreeSet::new(),
            }],
        };
        let e = sel.validate("spec.podSelector").expect_err("no values");
        assert!(e
            .0
            .starts_with("spec.podSelector.matchExpressions[0].values"));
    }
}
