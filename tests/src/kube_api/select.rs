//! Label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`) and field
//! selectors (`path=v`, `path==v`, `path!=v` over any dotted path of the object, e.g.
//! `metadata.name`, `metadata.namespace`, `spec.nodeName`; a real server accepts only a few
//! fields per kind).

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Req>);

fn split_terms(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth <= 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl LabelSelector {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for t in split_terms(s) {
            let bad = || format!("unable to parse requirement {t:?}");
            let req = if let Some(k) = t.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some(open) = t.find('(') {
                let close = t.rfind(')').filter(|c| *c > open).ok_or_else(bad)?;
                let head: Vec<&str> = t[..open].split_whitespace().collect();
                let vals: Vec<String> = t[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                match head.as_slice() {
                    [k, "in"] => Req::In(k.to_string(), vals),
                    [k, "notin"] => Req::NotIn(k.to_string(), vals),
                    _ => return Err(bad()),
                }
            } else if let Some((k, v)) = t.split_once("!=") {
                Req::Ne(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else {
                Req::Exists(t.clone())
            };
            let key = match &req {
                Req::Eq(k, _)
                | Req::Ne(k, _)
                | Req::Exists(k)
                | Req::NotExists(k)
                | Req::In(k, _)
                | Req::NotIn(k, _) => k,
            };
            if !valid_key(key) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
        })
    }
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(Vec<String>, bool, String)>);

fn field_value(obj: &Value, path: &[String]) -> String {
    let mut cur = obj;
    for p in path {
        match cur.get(p) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for t in split_terms(s) {
            let (k, eq, v) = if let Some((k, v)) = t.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: {t:?}; can't understand it"));
            };
            let k = k.trim();
            if !valid_key(k) {
                return Err(format!("invalid field selector key {k:?}"));
            }
            reqs.push((
                k.split('.').map(str::to_string).collect(),
                eq,
                v.trim().to_string(),
            ));
        }
        Ok(Self(reqs))
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(path, eq, v)| (field_value(obj, path) == *v) == *eq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kube_api_label_selectors() {
        let o = json!({"metadata": {"name": "n", "namespace": "ns", "labels": {"app": "web", "tier": "fe"}}});
        let m = |s: &str| LabelSelector::parse(s).expect("parses").matches(&o);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("app in (db, web),tier notin (be)"));
        assert!(!m("app in (db)"));
        assert!(m("missing notin (x)"));
        assert!(!m("missing"));
        assert!(LabelSelector::parse("app in (x").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn kube_api_field_selectors() {
        let o = json!({"metadata": {"name": "n", "namespace": "ns"}, "spec": {"nodeName": "x"}});
        let m = |s: &str| FieldSelector::parse(s).expect("parses").matches(&o);
        assert!(m("metadata.name=n,metadata.namespace==ns"));
        assert!(!m("metadata.name=m"));
        assert!(m("metadata.name!=m,spec.nodeName=x"));
        assert!(FieldSelector::parse("bogus").is_err());
    }
}
