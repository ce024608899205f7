//! Label selectors: parsing, canonical printing and matching.
//!
//! Accepts the upstream string syntax (`k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//! `k`, `!k`, `k>1`, `k<1`, comma-separated) and `metav1.LabelSelector` objects. Keys and
//! values are validated like upstream (qualified names, label values). Requirements are kept
//! sorted by key, values sorted and deduplicated, so [`Selector`]'s `Display` is canonical.
//! [`Selector::matches`] does not allocate: it is evaluated per object on large lists.

use std::fmt;

use serde_json::{Map, Value};

use crate::validation;

/// Why a label selector could not be parsed or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The string does not follow the selector grammar.
    #[error("unable to parse requirement: found '{found}', expected: {expected}")]
    Syntax {
        /// The token found.
        found: String,
        /// What the grammar expected there.
        expected: &'static str,
    },
    /// A key is not a valid qualified name.
    #[error("invalid label key \"{key}\": {reason}")]
    InvalidKey {
        /// The key.
        key: String,
        /// The validation messages.
        reason: String,
    },
    /// A value is not a valid label value.
    #[error("invalid label value: \"{value}\": at key: \"{key}\": {reason}")]
    InvalidValue {
        /// The key the value belongs to.
        key: String,
        /// The value.
        value: String,
        /// The validation messages.
        reason: String,
    },
    /// The number of values does not suit the operator.
    #[error("{0}")]
    ValueCount(&'static str),
    /// A `Gt`/`Lt` value is not an integer.
    #[error("for 'Gt', 'Lt' operators, the value must be an integer: {0}")]
    NotAnInteger(String),
    /// A `matchExpressions` operator is not one of In, NotIn, Exists, DoesNotExist.
    #[error("\"{0}\" is not a valid label selector operator")]
    InvalidOperator(String),
    /// A `metav1.LabelSelector` object has the wrong shape.
    #[error("invalid label selector: {0}")]
    InvalidObject(String),
    /// The selector string is longer than [`MAX_SELECTOR_BYTES`].
    #[error("label selector is too long: {len} bytes, the limit is {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The selector has more than [`MAX_REQUIREMENTS`] requirements.
    #[error("label selector has too many requirements: {count}, the limit is {max}")]
    TooManyRequirements {
        /// How many it has.
        count: usize,
        /// The limit.
        max: usize,
    },
}

/// The longest label selector string [`Selector::parse`] accepts. Selectors come from query
/// strings any client writes; matching costs their size on every object listed or watched.
pub const MAX_SELECTOR_BYTES: usize = 8 * 1024;

/// The most requirements one parsed label selector may have.
pub const MAX_REQUIREMENTS: usize = 100;

/// How a requirement compares a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k=v`: the label exists and equals one of the values.
    Equals,
    /// `k==v`: same as [`Operator::Equals`].
    DoubleEquals,
    /// `k!=v`: the label is absent or differs.
    NotEquals,
    /// `k in (a,b)`: the label exists with one of the values.
    In,
    /// `k notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `k`: the label exists.
    Exists,
    /// `!k`: the label is absent.
    DoesNotExist,
    /// `k>n`: the label is an integer greater than n.
    GreaterThan,
    /// `k<n`: the label is an integer less than n.
    LessThan,
}

/// One requirement of a selector: a key, an operator and sorted, deduplicated values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement, validating the key, the values and their count like upstream
    /// `NewRequirement`.
    pub fn new(key: &str, op: Operator, values: Vec<String>) -> Result<Self, SelectorError> {
        let msgs = validation::qualified_name(key);
        if !msgs.is_empty() {
            return Err(SelectorError::InvalidKey {
                key: key.to_string(),
                reason: msgs.join("; "),
            });
        }
        let mut values = values;
        match op {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(SelectorError::ValueCount(
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    return Err(SelectorError::ValueCount(
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(SelectorError::ValueCount(
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    return Err(SelectorError::ValueCount(
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for v in &values {
                    if v.parse::<i64>().is_err() {
                        return Err(SelectorError::NotAnInteger(v.clone()));
                    }
                }
            }
        }
        if !matches!(op, Operator::GreaterThan | Operator::LessThan) {
            for v in &values {
                let msgs = validation::label_value(v);
                if !msgs.is_empty() {
                    return Err(SelectorError::InvalidValue {
                        key: key.to_string(),
                        value: v.clone(),
                        reason: msgs.join("; "),
                    });
                }
            }
        }
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_string(),
            op,
            values,
        })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values, sorted and deduplicated.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label set satisfies this requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels.and_then(|m| m.get(&self.key));
        let text = value.and_then(Value::as_str);
        let in_values = |t: &str| self.values.iter().any(|v| v == t);
        match self.op {
            Operator::Equals | Operator::DoubleEquals | Operator::In => text.is_some_and(in_values),
            Operator::NotEquals | Operator::NotIn => !text.is_some_and(in_values),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(have) = text.and_then(|t| t.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(want) = self.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.op {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let set = matches!(self.op, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A parsed label selector: all requirements must hold. The default (empty) selector matches
/// everything; [`Selector::nothing`] matches nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// A selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// A selector that matches no object (upstream's result for a null `LabelSelector`).
    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Builds a selector from requirements (sorted by key for a canonical form).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Selector {
            requirements,
            nothing: false,
        }
    }

    /// Parses the upstream string syntax; an empty or blank string matches everything.
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        if s.len() > MAX_SELECTOR_BYTES {
            return Err(SelectorError::TooLong {
                len: s.len(),
                max: MAX_SELECTOR_BYTES,
            });
        }
        let tokens = lex(s)?;
        let mut parser = Parser { tokens, pos: 0 };
        let requirements = parser.parse()?;
        if requirements.len() > MAX_REQUIREMENTS {
            return Err(SelectorError::TooManyRequirements {
                count: requirements.len(),
                max: MAX_REQUIREMENTS,
            });
        }
        Ok(Self::from_requirements(requirements))
    }

    /// Builds a selector from a `metav1.LabelSelector` JSON object. `null` matches nothing;
    /// an object without requirements matches everything.
    pub fn from_label_selector(v: &Value) -> Result<Selector, SelectorError> {
        if v.is_null() {
            return Ok(Self::nothing());
        }
        let obj = v
            .as_object()
            .ok_or_else(|| SelectorError::InvalidObject("must be an object".into()))?;
        let mut reqs = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, val) in labels {
                    let val = val.as_str().ok_or_else(|| {
                        SelectorError::InvalidObject(format!("matchLabels[{k}] must be a string"))
                    })?;
                    reqs.push(Requirement::new(
                        k,
                        Operator::Equals,
                        vec![val.to_string()],
                    )?);
                }
            }
            Some(_) => {
                return Err(SelectorError::InvalidObject(
                    "matchLabels must be an object".into(),
                ))
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for expr in exprs {
                    reqs.push(expression(expr)?);
                }
            }
            Some(_) => {
                return Err(SelectorError::InvalidObject(
                    "matchExpressions must be a list".into(),
                ))
            }
        }
        Ok(Self::from_requirements(reqs))
    }

    /// Whether an object with these labels (`metadata.labels`) is selected. Never allocates.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector has no requirements (and so matches everything).
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

impl fmt::Display for Selector {
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

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

fn expression(expr: &Value) -> Result<Requirement, SelectorError> {
    let key = expr
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| SelectorError::InvalidObject("matchExpressions[].key is required".into()))?;
    let op = expr.get("operator").and_then(Value::as_str).unwrap_or("");
    let op = match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => return Err(SelectorError::InvalidOperator(other.to_string())),
    };
    let mut values = Vec::new();
    match expr.get("values") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let s = item.as_str().ok_or_else(|| {
                    SelectorError::InvalidObject("matchExpressions[].values must be strings".into())
                })?;
                values.push(s.to_string());
            }
        }
        Some(_) => {
            return Err(SelectorError::InvalidObject(
                "matchExpressions[].values must be a list".into(),
            ))
        }
    }
    Requirement::new(key, op, values)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    In,
    NotIn,
    Bang,
    NotEquals,
    Equals,
    DoubleEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
    End,
}

impl Token {
    fn text(&self) -> &str {
        match self {
            Token::Ident(s) => s,
            Token::In => "in",
            Token::NotIn => "notin",
            Token::Bang => "!",
            Token::NotEquals => "!=",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::Greater => ">",
            Token::Less => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::End => "",
        }
    }

    /// In a value position the keywords `in` and `notin` are plain identifiers.
    fn as_value(&self) -> Option<&str> {
        match self {
            Token::Ident(s) => Some(s),
            Token::In => Some("in"),
            Token::NotIn => Some("notin"),
            _ => None,
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(s: &str) -> Result<Vec<Token>, SelectorError> {
    let mut tokens = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let next = chars.peek().map(|&(_, n)| n);
            let token = match (c, next) {
                ('!', Some('=')) => {
                    chars.next();
                    Token::NotEquals
                }
                ('=', Some('=')) => {
                    chars.next();
                    Token::DoubleEquals
                }
                ('!', _) => Token::Bang,
                ('=', _) => Token::Equals,
                ('(', _) => Token::Open,
                (')', _) => Token::Close,
                (',', _) => Token::Comma,
                ('>', _) => Token::Greater,
                _ => Token::Less,
            };
            tokens.push(token);
            continue;
        }
        let mut end = s.len();
        while let Some(&(i, c)) = chars.peek() {
            if c.is_whitespace() || is_special(c) {
                end = i;
                break;
            }
            chars.next();
        }
        let word = s.get(start..end).unwrap_or_default();
        tokens.push(match word {
            "in" => Token::In,
            "notin" => Token::NotIn,
            w => Token::Ident(w.to_string()),
        });
    }
    tokens.push(Token::End);
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        self.tokens.get(self.pos).unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn syntax(found: &Token, expected: &'static str) -> SelectorError {
        SelectorError::Syntax {
            found: found.text().to_string(),
            expected,
        }
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut reqs = Vec::new();
        if *self.peek() == Token::End {
            return Ok(reqs);
        }
        loop {
            reqs.push(self.requirement()?);
            match self.next() {
                Token::End => return Ok(reqs),
                Token::Comma => {
                    if *self.peek() == Token::End {
                        return Err(Self::syntax(&Token::End, "identifier after ','"));
                    }
                }
                other => return Err(Self::syntax(&other, "',' or 'end of string'")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let negated = *self.peek() == Token::Bang;
        if negated {
            self.next();
        }
        let key = match self.next() {
            Token::Ident(k) => k,
            other => return Err(Self::syntax(&other, "identifier")),
        };
        if negated {
            return Requirement::new(&key, Operator::DoesNotExist, Vec::new());
        }
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Requirement::new(&key, Operator::Exists, Vec::new());
        }
        let op = match self.next() {
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Greater => Operator::GreaterThan,
            Token::Less => Operator::LessThan,
            other => {
                return Err(Self::syntax(&other, "[=, ==, !=, in, notin, >, <]"));
            }
        };
        let values = if matches!(op, Operator::In | Operator::NotIn) {
            self.value_set()?
        } else {
            self.exact_value()?
        };
        Requirement::new(&key, op, values)
    }

    fn exact_value(&mut self) -> Result<Vec<String>, SelectorError> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let t = self.next();
        match t.as_value() {
            Some(v) => Ok(vec![v.to_string()]),
            None => Err(Self::syntax(&t, "identifier")),
        }
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        let open = self.next();
        if open != Token::Open {
            return Err(Self::syntax(&open, "'('"));
        }
        let mut values = Vec::new();
        if *self.peek() == Token::Close {
            self.next();
            return Ok(values);
        }
        // Each slot between '(' , ',' and ')' holds one value; an empty slot is "".
        loop {
            let t = self.next();
            match t.as_value() {
                Some(v) => {
                    values.push(v.to_string());
                    match self.next() {
                        Token::Comma => {}
                        Token::Close => return Ok(values),
                        other => return Err(Self::syntax(&other, "',' or ')'")),
                    }
                }
                None => match t {
                    Token::Comma => values.push(String::new()),
                    Token::Close => {
                        values.push(String::new());
                        return Ok(values);
                    }
                    other => return Err(Self::syntax(&other, "',', or identifier")),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_selectors_and_many_requirements_are_refused() {
        // 30 KiB of `in` values: refused before it is lexed.
        let values: Vec<String> = (0..3000).map(|i| format!("v{i:05}")).collect();
        let long = format!("app in ({})", values.join(","));
        assert!(long.len() > 20 * 1024);
        assert!(matches!(
            Selector::parse(&long),
            Err(SelectorError::TooLong { .. })
        ));
        let many: Vec<String> = (0..=MAX_REQUIREMENTS).map(|i| format!("k{i}=v")).collect();
        assert!(matches!(
            Selector::parse(&many.join(",")),
            Err(SelectorError::TooManyRequirements { count, .. }) if count == MAX_REQUIREMENTS + 1
        ));
        let fine: Vec<String> = (0..MAX_REQUIREMENTS).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            Selector::parse(&fine.join(","))
                .map(|s| s.requirements().len())
                .ok(),
            Some(MAX_REQUIREMENTS)
        );
    }

    fn labels(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn parses_and_prints_canonically() {
        let cases = [
            ("", ""),
            ("  ", ""),
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("x = a , y!=b", "x=a,y!=b"),
            ("z in (b,a,a), a notin (c)", "a notin (c),z in (a,b)"),
            ("!y,x", "x,!y"),
            ("x=", "x="),
            ("x in (a,)", "x in (,a)"),
            ("n>5,m<3", "m<3,n>5"),
            ("example.com/app=web", "example.com/app=web"),
            ("x=in", "x=in"),
            ("x in (in,notin)", "x in (in,notin)"),
            (" x  in ( b , a ) ", "x in (a,b)"),
            ("x notin (a),x", "x notin (a),x"),
        ];
        for (input, want) in cases {
            let s = Selector::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(s.to_string(), want, "{input}");
            let again = Selector::parse(&s.to_string()).unwrap_or_else(|e| panic!("{want}: {e}"));
            assert_eq!(again, s);
        }
    }

    #[test]
    fn rejects_bad_syntax_and_values() {
        for bad in [
            "x=a,",
            ",x",
            "x in a",
            "x in (a",
            "x in ()",
            "x=a=b",
            "!x=a",
            "x y",
            "bad key=a",
            "x=-a",
            "x>a",
            "a/b/c",
            "x in (a b)",
            "=a",
        ] {
            assert!(Selector::parse(bad).is_err(), "{bad} should fail");
        }
        let err = Selector::parse("x=a,").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unable to parse requirement: found '', expected: identifier after ','")
        );
    }

    #[test]
    fn arbitrary_input_never_panics() {
        let alphabet: Vec<char> = "ab=!(),<> 1/.-_inotéx\\".chars().collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..5000 {
            let mut s = String::new();
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 59) as usize;
            for _ in 0..len {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let i = (seed >> 33) as usize % alphabet.len();
                s.push(alphabet[i]);
            }
            if let Ok(sel) = Selector::parse(&s) {
                // The canonical form parses back to the same selector.
                assert_eq!(Selector::parse(&sel.to_string()).ok(), Some(sel), "{s:?}");
            }
            let _ = crate::fields::FieldSelector::parse(&s);
            let _ = s.parse::<crate::quantity::Quantity>();
        }
    }

    #[test]
    fn matching() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "7"}));
        let m = Some(&l);
        let yes = |s: &str| {
            Selector::parse(s)
                .map(|sel| sel.matches(m))
                .unwrap_or(false)
        };
        assert!(yes(""));
        assert!(yes("app=web"));
        assert!(yes("app==web,tier"));
        assert!(yes("app in (db,web)"));
        assert!(yes("app notin (db)"));
        assert!(yes("missing notin (db)"));
        assert!(yes("missing!=x"));
        assert!(yes("!missing"));
        assert!(yes("n>5") && yes("n<8"));
        assert!(!yes("n>7") && !yes("app>1"));
        assert!(!yes("app=db"));
        assert!(!yes("app!=web"));
        assert!(!yes("!app"));
        assert!(!yes("missing"));
        assert!(!yes("missing=x"));
        assert!(!yes("app in (db)"));
        let sel = Selector::parse("missing!=x,!gone").unwrap_or_default();
        assert!(sel.matches(None));
        assert!(!Selector::parse("app").unwrap_or_default().matches(None));
    }

    #[test]
    fn from_label_selector_objects() {
        let v = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "back"]},
                {"key": "legacy", "operator": "DoesNotExist"}
            ]
        });
        let sel = Selector::from_label_selector(&v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sel.to_string(), "app=web,!legacy,tier in (back,front)");
        let l = labels(json!({"app": "web", "tier": "back"}));
        assert!(sel.matches(Some(&l)));
        let l2 = labels(json!({"app": "web", "tier": "back", "legacy": ""}));
        assert!(!sel.matches(Some(&l2)));

        let all = Selector::from_label_selector(&json!({})).unwrap_or_else(|e| panic!("{e}"));
        assert!(all.is_empty() && all.matches(None));
        let none = Selector::from_label_selector(&Value::Null).unwrap_or_else(|e| panic!("{e}"));
        assert!(!none.is_empty() && !none.matches(Some(&l)));

        let bad_op = json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]});
        assert_eq!(
            Selector::from_label_selector(&bad_op).map(|_| ()),
            Err(SelectorError::InvalidOperator("Gt".into()))
        );
        let exists_with_values =
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["1"]}]});
        assert!(Selector::from_label_selector(&exists_with_values).is_err());
        let in_without_values = json!({"matchExpressions": [{"key": "a", "operator": "In"}]});
        assert!(Selector::from_label_selector(&in_without_values).is_err());
        assert!(Selector::from_label_selector(&json!({"matchLabels": {"a": 1}})).is_err());
        assert!(Selector::from_label_selector(&json!([1])).is_err());
    }
}
