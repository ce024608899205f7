//! Validation of names, label keys and values, annotations and object metadata.
//!
//! Every function returns the list of problems found, empty when the value is valid, with the
//! exact wording of upstream `k8s.io/apimachinery/pkg/util/validation` so that clients and
//! users see the messages they know. The checks are hand-written equivalents of the upstream
//! regular expressions (quoted in the messages) and never panic, whatever the input.

use std::fmt;

use serde_json::Value;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Longest DNS-1123 label (and DNS-1035 label, qualified-name part, label value).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Largest total size of an object's annotations (keys plus values), in bytes.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// Upstream `RegexError`: the message, examples and the regular expression used.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = String::from(msg);
    if examples.is_empty() {
        out.push_str(" (regex used for validation is '");
    } else {
        out.push_str(" (e.g. ");
        for (i, example) in examples.iter().enumerate() {
            if i > 0 {
                out.push_str(" or ");
            }
            out.push('\'');
            out.push_str(example);
            out.push_str("', ");
        }
        out.push_str("regex used for validation is '");
    }
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1123_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && bytes.iter().all(|&b| is_lower_alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// Labels separated by single dots.
fn matches_dns1123_subdomain(value: &str) -> bool {
    value.split('.').all(matches_dns1123_label)
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1035_label(value: &str) -> bool {
    matches_dns1123_label(value) && value.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn matches_qualified_name_part(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Checks a lowercase RFC 1123 subdomain (most object names): at most 253 characters.
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Checks a lowercase RFC 1123 label (namespace names, container names): at most 63 characters.
pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Checks an RFC 1035 label (service names): starts with a letter, at most 63 characters.
pub fn dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1035_label(value) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// Checks a qualified name (label and annotation keys, finalizers): `[prefix/]name` where the
/// optional prefix is a DNS subdomain and the name is at most 63 characters.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(DNS1123_LABEL_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Checks a label value: empty, or a qualified-name part of at most 63 characters.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Checks a name that only has to be usable as one URL path segment (upstream
/// `IsValidPathSegmentName`): not `.` or `..`, no `/` and no `%`.
pub fn path_segment_name(value: &str) -> Vec<String> {
    if value == "." || value == ".." {
        return vec![format!("may not be '{value}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| value.contains(*bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// The kind of a field error; the variant names are upstream's `StatusCause.reason` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    /// A required value is missing ("Required value").
    FieldValueRequired,
    /// A value is malformed ("Invalid value").
    FieldValueInvalid,
    /// A value is not one of the supported ones ("Unsupported value").
    FieldValueNotSupported,
    /// A value that must be unique occurs twice ("Duplicate value").
    FieldValueDuplicate,
    /// A value is well-formed but not allowed here ("Forbidden").
    FieldValueForbidden,
    /// A value is too long; the value itself is not repeated ("Too long").
    FieldValueTooLong,
}

impl FieldErrorKind {
    /// The machine-readable cause type, e.g. `FieldValueInvalid` (`StatusCause.reason`).
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorKind::FieldValueRequired => "FieldValueRequired",
            FieldErrorKind::FieldValueInvalid => "FieldValueInvalid",
            FieldErrorKind::FieldValueNotSupported => "FieldValueNotSupported",
            FieldErrorKind::FieldValueDuplicate => "FieldValueDuplicate",
            FieldErrorKind::FieldValueForbidden => "FieldValueForbidden",
            FieldErrorKind::FieldValueTooLong => "FieldValueTooLong",
        }
    }

    /// The human-readable label, e.g. `Invalid value`.
    pub fn description(self) -> &'static str {
        match self {
            FieldErrorKind::FieldValueRequired => "Required value",
            FieldErrorKind::FieldValueInvalid => "Invalid value",
            FieldErrorKind::FieldValueNotSupported => "Unsupported value",
            FieldErrorKind::FieldValueDuplicate => "Duplicate value",
            FieldErrorKind::FieldValueForbidden => "Forbidden",
            FieldErrorKind::FieldValueTooLong => "Too long",
        }
    }
}

/// One validation problem at one field, like upstream `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// What kind of problem.
    pub kind: FieldErrorKind,
    /// The field path, e.g. `metadata.name` or `spec.containers[0].image`.
    pub field: String,
    /// The detail, e.g. the rule the value breaks; may be empty.
    pub message: String,
    /// The offending value, shown quoted for kinds that show values.
    pub value: Option<String>,
}

impl FieldError {
    /// A missing required value.
    pub fn required(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::FieldValueRequired, field, None, message)
    }

    /// A malformed value.
    pub fn invalid(field: impl Into<String>, value: &str, message: impl Into<String>) -> Self {
        Self::new(
            FieldErrorKind::FieldValueInvalid,
            field,
            Some(value),
            message,
        )
    }

    /// A value that is not allowed here.
    pub fn forbidden(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::FieldValueForbidden, field, None, message)
    }

    /// A value longer than `max_bytes` bytes.
    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        Self::new(
            FieldErrorKind::FieldValueTooLong,
            field,
            None,
            format!("must have at most {max_bytes} bytes"),
        )
    }

    fn new(
        kind: FieldErrorKind,
        field: impl Into<String>,
        value: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: field.into(),
            message: message.into(),
            value: value.map(str::to_string),
        }
    }

    /// The message without the field path (upstream `ErrorBody`, used as
    /// `StatusCause.message`): `Invalid value: "Foo": <detail>`.
    pub fn body(&self) -> String {
        let mut out = String::from(self.kind.description());
        let shows_value = !matches!(
            self.kind,
            FieldErrorKind::FieldValueRequired
                | FieldErrorKind::FieldValueForbidden
                | FieldErrorKind::FieldValueTooLong
        );
        if shows_value {
            out.push_str(": ");
            match &self.value {
                Some(v) => push_go_quoted(&mut out, v),
                None => out.push_str("\"\""),
            }
        }
        if !self.message.is_empty() {
            out.push_str(": ");
            out.push_str(&self.message);
        }
        out
    }

    /// The full message like upstream `field.Error.Error()`:
    /// `metadata.name: Invalid value: "Foo": <detail>`.
    pub fn message_string(&self) -> String {
        format!("{}: {}", self.field, self.body())
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message_string())
    }
}

impl std::error::Error for FieldError {}

/// Quotes like Go's `%q`: escapes quotes, backslashes and control characters.
fn push_go_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Upstream `maskTrailingDash`: a `generateName` may end in `-` because a suffix follows.
fn mask_trailing_dash(name: &str) -> String {
    match name.strip_suffix('-') {
        Some(stem) if !stem.is_empty() => format!("{stem}a"),
        _ => name.to_string(),
    }
}

fn string_field<'a>(meta: &'a Value, key: &str) -> &'a str {
    meta.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Validates `metadata` of an object on create or update, like upstream
/// `ValidateObjectMeta`: `name` (or `generateName`) present and accepted by
/// `name_validator`; `namespace` present and a DNS label for namespaced kinds, absent for
/// cluster-scoped ones; label keys and values; annotation keys and their total size
/// (at most 256 KiB); finalizer names.
pub fn validate_object_meta(
    meta: &Value,
    namespaced: bool,
    name_validator: fn(&str) -> Vec<String>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = string_field(meta, "name");
    let generate_name = string_field(meta, "generateName");

    if !generate_name.is_empty() {
        for msg in name_validator(&mask_trailing_dash(generate_name)) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                msg,
            ));
        }
    }
    if name.is_empty() {
        if generate_name.is_empty() {
            errs.push(FieldError::required(
                "metadata.name",
                "name or generateName is required",
            ));
        }
    } else {
        for msg in name_validator(name) {
            errs.push(FieldError::invalid("metadata.name", name, msg));
        }
    }

    let namespace = string_field(meta, "namespace");
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for msg in dns1123_label(namespace) {
                errs.push(FieldError::invalid("metadata.namespace", namespace, msg));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        ));
    }

    validate_labels(meta.get("labels"), "metadata.labels", &mut errs);
    validate_annotations(meta.get("annotations"), "metadata.annotations", &mut errs);
    validate_finalizers(meta.get("finalizers"), "metadata.finalizers", &mut errs);
    errs
}

/// Label keys must be qualified names, values valid label values (all strings).
pub fn validate_labels(labels: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let Some(labels) = labels.filter(|v| !v.is_null()) else {
        return;
    };
    let Some(map) = labels.as_object() else {
        errs.push(FieldError::invalid(
            path,
            &labels.to_string(),
            "must be an object",
        ));
        return;
    };
    for (key, value) in map {
        for msg in qualified_name(key) {
            errs.push(FieldError::invalid(path, key, msg));
        }
        match value.as_str() {
            Some(v) => {
                for msg in label_value(v) {
                    errs.push(FieldError::invalid(path, v, msg));
                }
            }
            None => errs.push(FieldError::invalid(
                path,
                &value.to_string(),
                "must be a string",
            )),
        }
    }
}

/// Annotation keys must be qualified names (case-insensitively); the keys and values together
/// must not exceed [`TOTAL_ANNOTATION_SIZE_LIMIT`] bytes.
pub fn validate_annotations(annotations: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let Some(annotations) = annotations.filter(|v| !v.is_null()) else {
        return;
    };
    let Some(map) = annotations.as_object() else {
        errs.push(FieldError::invalid(
            path,
            &annotations.to_string(),
            "must be an object",
        ));
        return;
    };
    let mut total = 0usize;
    for (key, value) in map {
        for msg in qualified_name(&key.to_lowercase()) {
            errs.push(FieldError::invalid(path, key, msg));
        }
        total = total.saturating_add(key.len());
        match value.as_str() {
            Some(v) => total = total.saturating_add(v.len()),
            None => errs.push(FieldError::invalid(
                path,
                &value.to_string(),
                "must be a string",
            )),
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

fn validate_finalizers(finalizers: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let Some(list) = finalizers.and_then(Value::as_array) else {
        return;
    };
    for item in list {
        match item.as_str() {
            Some(f) => {
                for msg in qualified_name(f) {
                    errs.push(FieldError::invalid(path, f, msg));
                }
            }
            None => errs.push(FieldError::invalid(
                path,
                &item.to_string(),
                "must be a string",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subdomain_accepts_and_rejects() {
        assert!(dns1123_subdomain("example.com").is_empty());
        assert!(dns1123_subdomain("a").is_empty());
        assert!(dns1123_subdomain("a-b.c-d").is_empty());
        for bad in ["", "Foo", "-a", "a-", "a..b", ".a", "a_b", "a."] {
            assert_eq!(dns1123_subdomain(bad).len(), 1, "{bad}");
        }
        let errs = dns1123_subdomain("Foo");
        assert_eq!(
            errs[0],
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        let long = "a".repeat(254);
        assert_eq!(
            dns1123_subdomain(&long),
            vec!["must be no more than 253 characters".to_string()]
        );
        assert!(dns1123_subdomain(&"a".repeat(253)).is_empty());
    }

    #[test]
    fn label_rules() {
        assert!(dns1123_label("my-name").is_empty());
        assert!(dns1123_label("123").is_empty());
        assert_eq!(
            dns1123_label("a.b"),
            vec!["must not contain dots".to_string()]
        );
        assert_eq!(
            dns1123_label("A")[0],
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert_eq!(dns1123_label(&"a".repeat(64)).len(), 1);
        assert!(dns1035_label("abc-1").is_empty());
        assert_eq!(dns1035_label("1abc").len(), 1);
        assert_eq!(dns1035_label("").len(), 1);
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "a",
            "MyName",
            "my.name",
            "example.com/MyName",
            "k8s.io/app_x-1",
        ] {
            assert!(qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            qualified_name("/a"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(qualified_name("a/"), {
            let mut v = vec!["name part must be non-empty".to_string()];
            v.push(format!(
                "name part {}",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            v
        });
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert!(qualified_name("Bad_/x")[0].starts_with("prefix part a lowercase RFC 1123"));
        assert_eq!(
            qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters".to_string()]
        );
        assert_eq!(qualified_name("-a").len(), 1);
    }

    #[test]
    fn label_values() {
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_3-x").is_empty());
        assert_eq!(label_value("-x").len(), 1);
        assert_eq!(label_value("a b").len(), 1);
        assert_eq!(label_value(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn path_segments() {
        assert!(path_segment_name("anything:goes").is_empty());
        assert_eq!(path_segment_name(".."), vec!["may not be '..'".to_string()]);
        assert_eq!(
            path_segment_name("a/b%c"),
            vec![
                "may not contain '/'".to_string(),
                "may not contain '%'".to_string()
            ]
        );
    }

    #[test]
    fn field_error_rendering() {
        let e = FieldError::invalid("metadata.name", "Foo", "bad");
        assert_eq!(
            e.message_string(),
            "metadata.name: Invalid value: \"Foo\": bad"
        );
        assert_eq!(e.kind.cause_type(), "FieldValueInvalid");
        let r = FieldError::required("metadata.namespace", "");
        assert_eq!(r.message_string(), "metadata.namespace: Required value");
        let t = FieldError::too_long("metadata.annotations", 262144);
        assert_eq!(
            t.to_string(),
            "metadata.annotations: Too long: must have at most 262144 bytes"
        );
        let q = FieldError::invalid("x", "a\"b\n", "");
        assert_eq!(q.body(), "Invalid value: \"a\\\"b\\n\"");
    }

    #[test]
    fn object_meta_name_and_namespace() {
        let errs = validate_object_meta(&json!({}), true, dns1123_subdomain);
        assert_eq!(errs.len(), 2);
        assert_eq!(
            errs[0].message_string(),
            "metadata.name: Required value: name or generateName is required"
        );
        assert_eq!(errs[1].field, "metadata.namespace");

        let ok = validate_object_meta(
            &json!({"generateName": "web-", "namespace": "default"}),
            true,
            dns1123_subdomain,
        );
        assert!(ok.is_empty(), "{ok:?}");

        let errs = validate_object_meta(
            &json!({"name": "Foo", "namespace": "x"}),
            false,
            dns1123_subdomain,
        );
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].field, "metadata.name");
        assert_eq!(errs[0].value.as_deref(), Some("Foo"));
        assert_eq!(
            errs[1].message_string(),
            "metadata.namespace: Forbidden: not allowed on this type"
        );

        let errs = validate_object_meta(
            &json!({"name": "a", "namespace": "Bad.NS"}),
            true,
            dns1123_subdomain,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.namespace");
    }

    #[test]
    fn object_meta_labels_annotations_finalizers() {
        let meta = json!({
            "name": "a",
            "labels": {"ok": "v", "bad key": "v", "k": "-bad", "n": 3},
            "annotations": {"Example.com/Key": "fine", "a/b/c": "x"},
            "finalizers": ["kubernetes.io/pvc", "bad/fin/alizer"]
        });
        let errs = validate_object_meta(&meta, false, dns1123_subdomain);
        let fields: Vec<(&str, Option<&str>)> = errs
            .iter()
            .map(|e| (e.field.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("metadata.labels", Some("bad key")),
                ("metadata.labels", Some("-bad")),
                ("metadata.labels", Some("3")),
                ("metadata.annotations", Some("a/b/c")),
                ("metadata.finalizers", Some("bad/fin/alizer")),
            ]
        );
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let errs = validate_object_meta(
            &json!({"name": "a", "annotations": {"k": big}}),
            false,
            path_segment_name,
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].kind, FieldErrorKind::FieldValueTooLong);
    }
}
