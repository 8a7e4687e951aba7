//! Patch bodies: RFC 7386 JSON merge patch (also used, approximately, for strategic merge
//! patch and server-side apply) and RFC 6902 JSON patch.

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` removes a member, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Strategic merge patch directives (`$patch`, `$retainKeys`, `$setElementOrder/...`,
/// `$deleteFromPrimitiveList/...`) are dropped: the rest is applied as a merge patch, so lists
/// are replaced, never merged by key.
pub(crate) fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer {p:?}"));
    };
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn index(a: &[Value], tok: &str, allow_end: bool) -> Result<usize, String> {
    if allow_end && tok == "-" {
        return Ok(a.len());
    }
    let i: usize = tok
        .parse()
        .map_err(|_| format!("invalid array index {tok:?}"))?;
    let max = if allow_end {
        a.len()
    } else {
        a.len().saturating_sub(1)
    };
    if i > max || (!allow_end && a.is_empty()) {
        return Err(format!("array index {i} out of bounds"));
    }
    Ok(i)
}

fn get_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for tok in path {
        cur = match cur {
            Value::Object(m) => m
                .get_mut(tok)
                .ok_or_else(|| format!("path member {tok:?} does not exist"))?,
            Value::Array(a) => {
                let i = index(a, tok, false)?;
                &mut a[i]
            }
            _ => return Err(format!("cannot traverse into a scalar at {tok:?}")),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &[String], v: Value) -> Result<(), String> {
    let Some((last, parent)) = path.split_last() else {
        *doc = v;
        return Ok(());
    };
    match get_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), v);
        }
        Value::Array(a) => {
            let i = index(a, last, true)?;
            a.insert(i, v);
        }
        _ => return Err("add: parent is not a container".into()),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let Some((last, parent)) = path.split_last() else {
        return Ok(std::mem::take(doc));
    };
    match get_mut(doc, parent)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| format!("remove: member {last:?} does not exist")),
        Value::Array(a) => {
            let i = index(a, last, false)?;
            Ok(a.remove(i))
        }
        _ => Err("remove: parent is not a container".into()),
    }
}

/// RFC 6902: add, remove, replace, move, copy, test. Errors describe the failing operation.
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let Value::Array(ops) = ops else {
        return Err("a JSON patch must be an array of operations".into());
    };
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).unwrap_or_default();
        let path = parse_pointer(
            op.get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("operation {name:?} has no path"))?,
        )?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("operation {name:?} has no value"))
        };
        let from = || -> Result<Vec<String>, String> {
            parse_pointer(
                op.get("from")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("operation {name:?} has no from"))?,
            )
        };
        match name {
            "add" => add(doc, &path, value()?)?,
            "remove" => {
                remove(doc, &path)?;
            }
            "replace" => *get_mut(doc, &path)? = value()?,
            "test" => {
                let want = value()?;
                if *get_mut(doc, &path)? != want {
                    return Err(format!("test operation failed at {:?}", op["path"]));
                }
            }
            "move" => {
                let v = remove(doc, &from()?)?;
                add(doc, &path, v)?;
            }
            "copy" => {
                let v = get_mut(doc, &from()?)?.clone();
                add(doc, &path, v)?;
            }
            other => return Err(format!("unknown JSON patch operation {other:?}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kube_api_merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
        let mut s = json!("x");
        merge_patch(&mut s, &json!({"a": {"b": null, "c": 1}}));
        assert_eq!(s, json!({"a": {"c": 1}}));
    }

    #[test]
    fn kube_api_json_patch_ops() {
        let mut d = json!({"metadata": {"labels": {"a/b": "1"}}, "l": [1, 2, 3]});
        json_patch(
            &mut d,
            &json!([
                {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
                {"op": "add", "path": "/metadata/labels/x", "value": "y"},
                {"op": "remove", "path": "/l/0"},
                {"op": "add", "path": "/l/-", "value": 4},
                {"op": "replace", "path": "/l/0", "value": 9},
                {"op": "copy", "from": "/l/0", "path": "/c"},
                {"op": "move", "from": "/c", "path": "/m"}
            ]),
        )
        .expect("patch applies");
        assert_eq!(
            d,
            json!({"metadata": {"labels": {"a/b": "1", "x": "y"}}, "l": [9, 3, 4], "m": 9})
        );
        assert!(json_patch(&mut d, &json!([{"op": "test", "path": "/m", "value": 1}])).is_err());
        assert!(json_patch(
            &mut d,
            &json!([{"op": "replace", "path": "/nope", "value": 1}])
        )
        .is_err());
        assert!(json_patch(&mut d, &json!([{"op": "remove", "path": "/l/7"}])).is_err());
        assert!(json_patch(&mut d, &json!({"op": "add"})).is_err());
    }
}
