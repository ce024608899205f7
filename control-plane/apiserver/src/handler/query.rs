//! Reading a request: its query parameters (last value wins, like upstream's decoding for
//! scalars), its headers and its body within the size limit.

use super::*;

/// Query parameters (last value wins, like upstream's decoding for scalars).
#[derive(Clone)]
pub(super) struct Query(pub(super) HashMap<String, String>);

impl Query {
    pub(super) fn parse(query: Option<&str>) -> Query {
        Query(
            form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub(super) fn flag(&self, key: &str) -> Result<bool> {
        match self.get(key) {
            None | Some("") | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(other) => Err(ApiError::BadRequest(format!(
                "invalid value {other:?} for {key}: must be a boolean"
            ))),
        }
    }

    pub(super) fn int(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::BadRequest(format!("invalid value {v:?} for {key}: must be an integer"))
            }),
        }
    }

    pub(super) fn dry_run(&self) -> Result<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::BadRequest(format!(
                "Invalid dry run value: {other:?}: supported values: \"All\""
            ))),
        }
    }

    /// Options of a write; the field manager is `fieldManager`, else (as upstream) the
    /// client's User-Agent up to its first `/`.
    pub(super) fn write_options(&self, user_agent: Option<&str>) -> Result<WriteOptions> {
        let manager = match self.get("fieldManager") {
            Some(m) if !m.is_empty() => {
                if m.len() > 128 || m.chars().any(|c| c.is_control()) {
                    return Err(ApiError::BadRequest(
                        "fieldManager must be at most 128 printable characters".into(),
                    ));
                }
                m.to_string()
            }
            _ => user_agent
                .and_then(|ua| ua.split('/').next())
                .filter(|m| !m.is_empty())
                .unwrap_or("unknown")
                .chars()
                .filter(|c| !c.is_control())
                .take(128)
                .collect(),
        };
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_validation: FieldValidation::parse(self.get("fieldValidation").unwrap_or(""))?,
            field_manager: Some(manager),
            user: None,
            with_status: false,
        })
    }

    pub(super) fn selectors(&self) -> Result<(Selector, FieldSelector)> {
        use fabrik_machinery::labels::SelectorError;
        let labels = Selector::parse(self.get("labelSelector").unwrap_or("")).map_err(|e| {
            ApiError::BadRequest(match e {
                SelectorError::TooLong { .. } | SelectorError::TooManyRequirements { .. } => {
                    e.to_string()
                }
                e => format!("unable to parse requirement: {e}"),
            })
        })?;
        let fields = FieldSelector::parse(self.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::BadRequest(format!("invalid field selector: {e}")))?;
        Ok((labels, fields))
    }

    pub(super) fn list_params(&self) -> Result<ListParams> {
        let (labels, fields) = self.selectors()?;
        // Upstream does not validate the sign: a limit of 0 or less means "no limit".
        let limit = match self.int("limit")? {
            Some(l) if l > 0 => usize::try_from(l).ok(),
            _ => None,
        };
        Ok(ListParams {
            labels,
            fields,
            limit,
            continue_token: self.get("continue").map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match: self.get("resourceVersionMatch").map(str::to_string),
        })
    }
}

pub(super) fn header_str(req: &Request<RequestBody>, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// How much of an oversized body is still read (and discarded) before answering 413: a client
/// that is still writing when the connection closes sees a broken pipe instead of the Status.
const MAX_DRAIN_BYTES: usize = 4 * MAX_BODY_BYTES;

pub(super) async fn read_body<B>(mut body: B) -> Result<Bytes>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut buf: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::BadRequest(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen > MAX_BODY_BYTES {
            buf = Vec::new();
            if seen > MAX_DRAIN_BYTES {
                break;
            }
            continue;
        }
        buf.extend_from_slice(&data);
    }
    if seen > MAX_BODY_BYTES {
        return Err(ApiError::RequestEntityTooLarge {
            limit: MAX_BODY_BYTES,
        });
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn body_limit() {
        let small = read_body(Full::new(Bytes::from_static(b"{}"))).await;
        assert_eq!(small.ok(), Some(Bytes::from_static(b"{}")));
        let exact = read_body(Full::new(Bytes::from(vec![b'x'; MAX_BODY_BYTES]))).await;
        assert_eq!(exact.map(|b| b.len()).ok(), Some(MAX_BODY_BYTES));
        let over = read_body(Full::new(Bytes::from(vec![b'x'; MAX_BODY_BYTES + 1]))).await;
        assert!(matches!(over, Err(ApiError::RequestEntityTooLarge { .. })));
    }
}
