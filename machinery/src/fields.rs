//! Field selectors (`fieldSelector=`): parsing, canonical printing and matching.
//!
//! Syntax as upstream `k8s.io/apimachinery/pkg/fields`: comma-separated `field=value`,
//! `field==value` or `field!=value`; in values, `\`, `,` and `=` are escaped with a backslash.
//! Terms are kept sorted, so `Display` is canonical. Which fields a kind supports is for the
//! caller to decide (through the getter given to [`FieldSelector::matches`]);
//! matching itself allocates only what the getter returns.

use std::fmt;

/// Why a field selector could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A term has no `=`, `==` or `!=` operator.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidTerm {
        /// The whole selector.
        selector: String,
        /// The term that has no operator.
        term: String,
    },
    /// A value contains a backslash not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscapeSequence(String),
    /// A value contains an unescaped `=` (or `,`).
    #[error("invalid field selector: unescaped character in value: {0}")]
    UnescapedRune(char),
    /// The selector is longer than [`MAX_SELECTOR_BYTES`].
    #[error("field selector is too long: {len} bytes, the limit is {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The selector has more than [`MAX_TERMS`] terms.
    #[error("field selector has too many terms: {count}, the limit is {max}")]
    TooManyTerms {
        /// How many it has.
        count: usize,
        /// The limit.
        max: usize,
    },
}

/// The longest field selector [`FieldSelector::parse`] accepts (kinds support a handful of
/// fields, each compared for equality).
pub const MAX_SELECTOR_BYTES: usize = 4 * 1024;

/// The most terms one field selector may have.
pub const MAX_TERMS: usize = 32;

/// How a term compares the field's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOp {
    /// `field=value` or `field==value`.
    Eq,
    /// `field!=value`.
    NotEq,
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// The comparison.
    pub op: FieldOp,
    /// The value, unescaped.
    pub value: String,
}

impl FieldRequirement {
    fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        let have = get(&self.field);
        let equal = have.as_deref().unwrap_or("") == self.value;
        match self.op {
            FieldOp::Eq => equal,
            FieldOp::NotEq => !equal,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Eq => "=",
            FieldOp::NotEq => "!=",
        };
        write!(f, "{}{}{}", self.field, op, escape_value(&self.value))
    }
}

/// A parsed field selector: all terms must hold. The default (empty) one matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses a selector string; an empty string matches everything.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        if s.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError::TooLong {
                len: s.len(),
                max: MAX_SELECTOR_BYTES,
            });
        }
        let mut terms = split_terms(s);
        if terms.len() > MAX_TERMS {
            return Err(SelectorError::TooManyTerms {
                count: terms.len(),
                max: MAX_TERMS,
            });
        }
        terms.sort_unstable();
        let mut requirements = Vec::with_capacity(terms.len());
        for term in terms {
            if term.is_empty() {
                continue;
            }
            let (field, op, rhs) = split_term(term).ok_or_else(|| SelectorError::InvalidTerm {
                selector: s.to_string(),
                term: term.to_string(),
            })?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                op,
                value: unescape_value(rhs)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// The terms, sorted.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether the selector has no terms.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value `field` must equal when the selector requires one (upstream
    /// `RequiresExactMatch`), e.g. to look up `metadata.name` directly.
    pub fn exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.op == FieldOp::Eq)
            .map(|r| r.value.as_str())
    }

    /// Whether an object is selected; `get(field)` returns the object's value for a field path,
    /// `None` when absent (compared as the empty string).
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| r.matches(get))
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

/// Escapes `\`, `,` and `=` in a value so that it can be put in a selector string.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Undoes [`escape_value`], rejecting unknown escapes and unescaped `,` or `=`.
pub fn unescape_value(value: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(value.len());
    let mut escaped = false;
    for c in value.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::InvalidEscapeSequence(format!("\\{c}")));
            }
            out.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            ',' | '=' => return Err(SelectorError::UnescapedRune(c)),
            c => out.push(c),
        }
    }
    if escaped {
        return Err(SelectorError::InvalidEscapeSequence("\\".to_string()));
    }
    Ok(out)
}

/// Splits on commas that are not escaped by a backslash.
fn split_terms(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(s.get(start..i).unwrap_or_default());
            start = i + 1;
        }
    }
    terms.push(s.get(start..).unwrap_or_default());
    terms
}

/// Splits a term at its first operator (`!=`, `==` or `=`, tried in that order at each place).
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = term.get(i..)?;
        let found = if rest.starts_with("!=") {
            Some((FieldOp::NotEq, 2))
        } else if rest.starts_with("==") {
            Some((FieldOp::Eq, 2))
        } else if rest.starts_with('=') {
            Some((FieldOp::Eq, 1))
        } else {
            None
        };
        if let Some((op, len)) = found {
            return Some((term.get(..i)?, op, term.get(i + len..)?));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_selectors_and_many_terms_are_refused() {
        let long = format!("metadata.name={}", "a".repeat(MAX_SELECTOR_BYTES));
        assert!(matches!(
            FieldSelector::parse(&long),
            Err(SelectorError::TooLong { .. })
        ));
        let many: Vec<String> = (0..=MAX_TERMS).map(|i| format!("f{i}=v")).collect();
        assert!(matches!(
            FieldSelector::parse(&many.join(",")),
            Err(SelectorError::TooManyTerms { .. })
        ));
        let fine: Vec<String> = (0..MAX_TERMS).map(|i| format!("f{i}=v")).collect();
        assert_eq!(
            FieldSelector::parse(&fine.join(","))
                .map(|s| s.requirements().len())
                .ok(),
            Some(MAX_TERMS)
        );
    }

    fn parse(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_terms() {
        let s = parse("spec.nodeName!=n1,metadata.name==web,status.phase=Running");
        assert_eq!(
            s.requirements(),
            &[
                FieldRequirement {
                    field: "metadata.name".into(),
                    op: FieldOp::Eq,
                    value: "web".into()
                },
                FieldRequirement {
                    field: "spec.nodeName".into(),
                    op: FieldOp::NotEq,
                    value: "n1".into()
                },
                FieldRequirement {
                    field: "status.phase".into(),
                    op: FieldOp::Eq,
                    value: "Running".into()
                },
            ]
        );
        assert_eq!(
            s.to_string(),
            "metadata.name=web,spec.nodeName!=n1,status.phase=Running"
        );
        assert_eq!(s.exact_match("metadata.name"), Some("web"));
        assert_eq!(s.exact_match("spec.nodeName"), None);
        assert!(parse("").is_empty());
        assert!(parse("a=b,,").requirements().len() == 1);
        assert_eq!(parse("a=").requirements()[0].value, "");
    }

    #[test]
    fn escaping() {
        let s = parse(r"a=x\,y\=z\\w,b=1");
        assert_eq!(s.requirements()[0].value, r"x,y=z\w");
        assert_eq!(s.to_string(), r"a=x\,y\=z\\w,b=1");
        assert_eq!(parse(&s.to_string()), s);
        assert_eq!(
            FieldSelector::parse(r"a=\q"),
            Err(SelectorError::InvalidEscapeSequence(r"\q".into()))
        );
        assert_eq!(
            FieldSelector::parse(r"a=b\"),
            Err(SelectorError::InvalidEscapeSequence(r"\".into()))
        );
        assert_eq!(
            FieldSelector::parse("a=b=c"),
            Err(SelectorError::UnescapedRune('='))
        );
        let err = FieldSelector::parse("abc").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid selector: 'abc'; can't understand 'abc'")
        );
    }

    #[test]
    fn matching_with_getter() {
        let get = |f: &str| match f {
            "metadata.name" => Some("web".to_string()),
            "spec.nodeName" => Some(String::new()),
            _ => None,
        };
        assert!(parse("metadata.name=web").matches(&get));
        assert!(!parse("metadata.name!=web").matches(&get));
        assert!(parse("spec.nodeName=").matches(&get));
        assert!(parse("status.phase=").matches(&get));
        assert!(parse("status.phase!=Running").matches(&get));
        assert!(!parse("status.phase=Running").matches(&get));
        assert!(!parse("metadata.name=web,spec.nodeName!=").matches(&get));
        assert!(parse("").matches(&get));
    }
}
