//! Service-account tokens of host pods, as upstream's kubelet gets them for projected
//! `serviceAccountToken` sources.
//!
//! For each tenant pod whose volumes have such sources ([`pods::token_sources`]) the syncer asks
//! the *tenant* API for a token (a TokenRequest bound to the tenant pod: name and UID, with the
//! source's audience and lifetime) and writes the tokens into one host Secret per host pod,
//! [`naming::token_secret_name`], one key per source; the host pod's projected volume mounts that
//! key where the token would have been ([`pods`]). The Secret is owned by the host pod (an
//! ownerReference, added once the host pod exists), so the host's garbage collector removes it
//! with the pod; the syncer deletes it as well when the tenant pod is gone.
//!
//! Rotation as the kubelet's: when a share ([`DEFAULT_REFRESH_FRACTION`], 80 %) of the token's
//! lifetime has passed, the pod is looked at again ([`crate::queue::Queue::push_after`]) and new
//! tokens replace the Secret's data (kubelets update Secret volumes in place). When the tenant
//! refuses (no such service account, ...), the host pod runs without the token; the request is
//! retried with backoff ([`Failures`]) and reported once per distinct error.
//!
//! What the Secret carries besides the tokens (annotations, none of them an origin annotation, so
//! that it is never taken for the copy of a tenant Secret): the tenant pod's name and UID, a hash
//! of what was asked for, and when to refresh.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fabrik_api::{LABEL_NAMESPACE, LABEL_TENANT};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::ByteString;
use serde_json::{json, Map, Value};

use crate::naming;
use crate::pods::TokenSource;

/// The tenant pod (its name) whose tokens a host Secret holds.
pub const ANNOTATION_POD: &str = "fabrik.dev/token-pod";
/// The UID of that tenant pod.
pub const ANNOTATION_POD_UID: &str = "fabrik.dev/token-pod-uid";
/// A hash of the service account and the sources the tokens were asked for.
pub const ANNOTATION_SPEC: &str = "fabrik.dev/token-spec";
/// When the tokens are to be refreshed (RFC 3339).
pub const ANNOTATION_REFRESH_AT: &str = "fabrik.dev/token-refresh-at";

/// The share of a token's lifetime after which it is refreshed (the kubelet's 80 %).
pub const DEFAULT_REFRESH_FRACTION: f64 = 0.8;

/// A token is never refreshed sooner than this after it was issued, whatever the fraction.
const MIN_REFRESH: Duration = Duration::from_secs(1);

/// The first wait after a failed TokenRequest; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between TokenRequests that fail.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Why tokens could not be had.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pod's service account name cannot be one (a DNS subdomain); nothing is asked.
    #[error("service account name {0:?} is not a valid name")]
    ServiceAccountName(String),
    /// The tenant API refused or failed the TokenRequest.
    #[error("the tenant API refused a token for service account {service_account:?}: {why}")]
    Request {
        /// The service account.
        service_account: String,
        /// What the tenant API said (its Status message when it answered with one).
        why: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The tenant API answered without a token.
    #[error("the tenant API's TokenRequest answer for service account {0:?} holds no token")]
    NoToken(String),
}

/// One token the tenant issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    /// Its key in the host Secret.
    pub key: String,
    /// The token.
    pub token: String,
    /// When it expires (milliseconds since the epoch).
    pub expires_ms: i64,
}

impl Error {
    /// A refused TokenRequest, said briefly (the API server's message when it gave one).
    pub fn request(service_account: &str, source: kube::Error) -> Error {
        let why = match &source {
            kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
            other => other.to_string(),
        };
        Error::Request {
            service_account: service_account.to_string(),
            why,
            source,
        }
    }
}

/// Whether `name` is a DNS subdomain, as upstream requires of service account names (the name
/// goes into a request path, so nothing else is sent).
pub fn valid_service_account(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

/// The TokenRequest body for one source, bound to tenant pod `pod` with `uid`.
pub fn token_request(source: &TokenSource, pod: &str, uid: &str) -> Value {
    let mut spec = json!({"expirationSeconds": source.expiration_seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}});
    if let Some(a) = &source.audience {
        spec["audiences"] = json!([a]);
    }
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
}

/// The token and its expiry from a TokenRequest answer; an expiry that is missing or does not
/// parse counts as `requested_at_ms` plus the lifetime asked for.
pub fn read_answer(answer: &Value, source: &TokenSource, requested_at_ms: i64) -> Option<Issued> {
    let token = answer["status"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())?;
    let asked = requested_at_ms.saturating_add(source.expiration_seconds.saturating_mul(1000));
    let expires_ms = answer["status"]["expirationTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map_or(asked, Timestamp::as_millisecond);
    Some(Issued {
        key: source.key.clone(),
        token: token.to_string(),
        expires_ms,
    })
}

/// When tokens issued at `issued_ms` are to be refreshed: after `fraction` of the shortest
/// lifetime, and not sooner than [`MIN_REFRESH`].
pub fn refresh_at_ms(issued_ms: i64, tokens: &[Issued], fraction: f64) -> i64 {
    let fraction = if fraction.is_finite() && fraction > 0.0 {
        fraction.min(1.0)
    } else {
        DEFAULT_REFRESH_FRACTION
    };
    let lifetime = tokens
        .iter()
        .map(|t| t.expires_ms.saturating_sub(issued_ms))
        .min()
        .unwrap_or(0);
    // Lifetimes are at most 2^32 s (2^42 ms): exact in an f64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let after = (lifetime as f64 * fraction) as i64;
    let min = i64::try_from(MIN_REFRESH.as_millis()).unwrap_or(1000);
    issued_ms.saturating_add(after.max(min))
}

/// A hash of what tokens are asked for: the service account and every source.
pub fn spec_hash(service_account: &str, sources: &[TokenSource]) -> String {
    let mut text = service_account.to_string();
    for s in sources {
        text.push_str(&format!(
            "\n{}\t{}\t{}\t{}",
            s.key,
            s.path,
            s.audience.as_deref().unwrap_or(""),
            s.expiration_seconds
        ));
    }
    format!("{:016x}", naming::fnv1a(text.as_bytes()))
}

/// What identifies the tokens a host Secret holds.
#[derive(Clone, Debug)]
pub struct SecretFor<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The tenant pod's namespace.
    pub namespace: &'a str,
    /// The tenant pod's name.
    pub pod: &'a str,
    /// The tenant pod's UID.
    pub pod_uid: &'a str,
    /// [`spec_hash`] of what was asked for.
    pub spec: &'a str,
    /// The host pod's name.
    pub host_pod: &'a str,
    /// The host pod's UID, once it exists (the Secret's owner).
    pub host_pod_uid: Option<&'a str>,
}

/// The ownerReference that makes host pod `name` / `uid` the owner of its token Secret.
pub fn owner_reference(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid})
}

/// The host token Secret holding `tokens`, to be refreshed at `refresh_at_ms`.
pub fn host_secret(f: &SecretFor<'_>, tokens: &[Issued], refresh_at_ms: i64) -> Value {
    let refresh = Timestamp::from_millisecond(refresh_at_ms)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let mut metadata = json!({
        "name": naming::token_secret_name(f.host_pod),
        "namespace": naming::host_namespace(f.tenant),
        "labels": {LABEL_TENANT: f.tenant, LABEL_NAMESPACE: f.namespace},
        "annotations": {ANNOTATION_POD: f.pod, ANNOTATION_POD_UID: f.pod_uid,
            ANNOTATION_SPEC: f.spec, ANNOTATION_REFRESH_AT: refresh},
    });
    if let Some(uid) = f.host_pod_uid {
        metadata["ownerReferences"] = json!([owner_reference(f.host_pod, uid)]);
    }
    let data: Map<String, Value> = tokens
        .iter()
        .map(|t| {
            (
                t.key.clone(),
                json!(ByteString(t.token.as_bytes().to_vec())),
            )
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata,
        "data": data})
}

/// The tenant pod (namespace, name) a host Secret holds the tokens of, if it is a token Secret
/// of `tenant`.
pub fn token_pod(secret: &Value, tenant: &str) -> Option<(String, String)> {
    let meta = &secret["metadata"];
    if meta["labels"][LABEL_TENANT].as_str() != Some(tenant) {
        return None;
    }
    let ns = meta["labels"][LABEL_NAMESPACE].as_str()?;
    let pod = meta["annotations"][ANNOTATION_POD].as_str()?;
    Some((ns.to_string(), pod.to_string()))
}

/// Whether a host token Secret still holds what is asked for now: tokens of this tenant pod
/// (UID) for the same spec. Returns when to refresh them, in milliseconds since the epoch (0
/// when the annotation is unreadable: at once).
pub fn current_refresh_at(secret: &Value, pod_uid: &str, spec: &str) -> Option<i64> {
    let a = &secret["metadata"]["annotations"];
    if a[ANNOTATION_POD_UID].as_str() != Some(pod_uid) || a[ANNOTATION_SPEC].as_str() != Some(spec)
    {
        return None;
    }
    Some(
        a[ANNOTATION_REFRESH_AT]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map_or(0, Timestamp::as_millisecond),
    )
}

/// Whether a host Secret names host pod `uid` as an owner.
pub fn owned_by(secret: &Value, uid: &str) -> bool {
    secret["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
}

/// Whether a host pod mounts Secret `name` (the syncer manages tokens only for host pods built
/// to mount them; pods built before keep what they have).
pub fn mounts_secret(host_pod: &Value, name: &str) -> bool {
    let volumes = host_pod["spec"]["volumes"].as_array().into_iter().flatten();
    volumes
        .flat_map(|v| v["projected"]["sources"].as_array().into_iter().flatten())
        .any(|s| s["secret"]["name"].as_str() == Some(name))
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

/// How long from now until `at_ms` (zero when past).
pub fn until(at_ms: i64) -> Duration {
    let left = at_ms.saturating_sub(now_ms());
    Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

/// Failed TokenRequests by tenant pod: when the next may be tried (backoff doubling from
/// [`FIRST_BACKOFF`] to [`MAX_BACKOFF`]) and the last error (reported once per change).
#[derive(Debug, Default)]
pub struct Failures {
    by_pod: Mutex<HashMap<(String, String), Failure>>,
}

#[derive(Debug)]
struct Failure {
    uid: String,
    attempts: u32,
    message: String,
    next: Instant,
}

impl Failures {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Failure>> {
        self.by_pod.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long pod `ns/name` (with `uid`) must still wait before its next TokenRequest;
    /// `None`: it may ask now.
    pub fn wait(&self, ns: &str, name: &str, uid: &str) -> Option<Duration> {
        let m = self.lock();
        let f = m.get(&(ns.to_string(), name.to_string()))?;
        if f.uid != uid {
            return None;
        }
        let now = Instant::now();
        (f.next > now).then(|| f.next - now)
    }

    /// Records a failure; returns the wait before the next try and whether `message` differs
    /// from the pod's last failure (report it then).
    pub fn failed(&self, ns: &str, name: &str, uid: &str, message: &str) -> (Duration, bool) {
        let mut m = self.lock();
        let entry = m
            .entry((ns.to_string(), name.to_string()))
            .or_insert_with(|| Failure {
                uid: uid.to_string(),
                attempts: 0,
                message: String::new(),
                next: Instant::now(),
            });
        if entry.uid != uid {
            entry.uid = uid.to_string();
            entry.attempts = 0;
            entry.message.clear();
        }
        entry.attempts = entry.attempts.saturating_add(1);
        let wait = backoff(entry.attempts);
        entry.next = Instant::now() + wait;
        let changed = entry.message != message;
        if changed {
            entry.message = message.to_string();
        }
        (wait, changed)
    }

    /// Forgets a pod's failures (it got its tokens, or it is gone).
    pub fn clear(&self, ns: &str, name: &str) {
        self.lock().remove(&(ns.to_string(), name.to_string()));
    }
}

/// The wait after the `attempts`-th failure in a row.
fn backoff(attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    FIRST_BACKOFF
        .saturating_mul(1u32 << doublings)
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(key: &str, audience: Option<&str>, secs: i64) -> TokenSource {
        TokenSource {
            key: key.into(),
            path: "token".into(),
            audience: audience.map(str::to_string),
            expiration_seconds: secs,
        }
    }

    #[test]
    fn requests_are_bound_to_the_pod() {
        let r = token_request(&source("token-0-0", Some("vault"), 600), "web", "u-1");
        assert_eq!(
            r["spec"],
            json!({"audiences": ["vault"], "expirationSeconds": 600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u-1"}})
        );
        let r = token_request(&source("token-0-0", None, 3607), "web", "u-1");
        assert!(r["spec"].get("audiences").is_none());
    }

    #[test]
    fn answers_and_refresh_times() {
        let s = source("token-1-0", None, 3600);
        let issued = Timestamp::from_second(1_000_000)
            .map(Timestamp::as_millisecond)
            .unwrap_or_default();
        let answer =
            json!({"status": {"token": "jwt", "expirationTimestamp": "1970-01-12T14:46:40Z"}});
        let t = read_answer(&answer, &s, issued).expect("a token");
        assert_eq!(t.expires_ms, issued + 3_600_000);
        // Unreadable expiry: the lifetime asked for.
        let answer = json!({"status": {"token": "jwt", "expirationTimestamp": "soon"}});
        let t = read_answer(&answer, &s, issued).expect("a token");
        assert_eq!(t.expires_ms, issued + 3_600_000);
        assert!(read_answer(&json!({"status": {}}), &s, issued).is_none());
        assert!(read_answer(&json!({"status": {"token": ""}}), &s, issued).is_none());
        // 80 % of the shortest lifetime.
        let short = Issued {
            key: "k".into(),
            token: "t".into(),
            expires_ms: issued + 600_000,
        };
        assert_eq!(
            refresh_at_ms(issued, &[t.clone(), short], DEFAULT_REFRESH_FRACTION),
            issued + 480_000
        );
        assert_eq!(
            refresh_at_ms(issued, std::slice::from_ref(&t), 0.5),
            issued + 1_800_000
        );
        // Nonsense fractions fall back to the default; tiny ones stop at a second.
        assert_eq!(
            refresh_at_ms(issued, std::slice::from_ref(&t), f64::NAN),
            issued + 2_880_000
        );
        assert_eq!(refresh_at_ms(issued, &[t], 1e-9), issued + 1000);
    }

    #[test]
    fn the_secret_names_its_pod_and_owner() {
        let f = SecretFor {
            tenant: "a",
            namespace: "prod",
            pod: "web",
            pod_uid: "u-1",
            spec: "h",
            host_pod: "web-x-prod-x-a",
            host_pod_uid: Some("host-uid"),
        };
        let tokens = [Issued {
            key: "token-1-0".into(),
            token: "jwt".into(),
            expires_ms: 0,
        }];
        let s = host_secret(&f, &tokens, 1_000);
        assert_eq!(s["metadata"]["name"], "web-x-prod-x-a-token");
        assert_eq!(s["metadata"]["namespace"], "fabrik-a");
        assert_eq!(s["type"], "Opaque");
        assert_eq!(s["data"], json!({"token-1-0": "and0"}));
        assert_eq!(
            s["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "web-x-prod-x-a", "uid": "host-uid"}])
        );
        assert!(owned_by(&s, "host-uid"));
        assert!(!owned_by(&s, "other"));
        // Not an origin: never taken for the copy of a tenant Secret.
        assert!(naming::origin(&s).is_none());
        assert_eq!(token_pod(&s, "a"), Some(("prod".into(), "web".into())));
        assert_eq!(token_pod(&s, "b"), None);
        assert_eq!(current_refresh_at(&s, "u-1", "h"), Some(1_000));
        assert_eq!(current_refresh_at(&s, "u-2", "h"), None);
        assert_eq!(current_refresh_at(&s, "u-1", "other"), None);
        let unowned = host_secret(
            &SecretFor {
                host_pod_uid: None,
                ..f
            },
            &tokens,
            1_000,
        );
        assert!(unowned["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn spec_hashes_change_with_what_is_asked() {
        let a = [source("token-0-0", None, 3600)];
        let b = [source("token-0-0", Some("x"), 3600)];
        assert_eq!(spec_hash("default", &a), spec_hash("default", &a));
        assert_ne!(spec_hash("default", &a), spec_hash("default", &b));
        assert_ne!(spec_hash("default", &a), spec_hash("builder", &a));
    }

    #[test]
    fn service_account_names_are_checked() {
        for ok in ["default", "a.b-c", "x1"] {
            assert!(valid_service_account(ok), "{ok}");
        }
        for bad in ["", "../secrets", "a/b", "A", "-a", "a-", &"a".repeat(254)] {
            assert!(!valid_service_account(bad), "{bad}");
        }
    }

    #[test]
    fn failures_back_off_and_report_changes_once() {
        let f = Failures::default();
        assert_eq!(f.wait("ns", "p", "u"), None);
        let (w1, changed) = f.failed("ns", "p", "u", "not found");
        assert!(changed);
        assert_eq!(w1, Duration::from_secs(1));
        let (w2, changed) = f.failed("ns", "p", "u", "not found");
        assert!(!changed, "the same error is reported once");
        assert_eq!(w2, Duration::from_secs(2));
        assert!(f.wait("ns", "p", "u").is_some());
        // Another pod of the same name starts afresh.
        assert_eq!(f.wait("ns", "p", "u2"), None);
        let (_, changed) = f.failed("ns", "p", "u", "forbidden");
        assert!(changed);
        for _ in 0..20 {
            f.failed("ns", "p", "u", "forbidden");
        }
        assert_eq!(f.failed("ns", "p", "u", "forbidden").0, MAX_BACKOFF);
        f.clear("ns", "p");
        assert_eq!(f.wait("ns", "p", "u"), None);
    }
}
