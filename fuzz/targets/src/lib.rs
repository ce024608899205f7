//! The fuzz targets of the parsers that read tenant-supplied input, as plain functions over
//! bytes. `fuzz/fuzz_targets/*.rs` hands libFuzzer's inputs to them (`scripts/fuzz.sh`), and
//! `tests/corpus.rs` replays every file of `fuzz/corpus/<target>/` through them in the normal
//! test suite, so a crash once found stays fixed without nightly Rust or cargo-fuzz.
//!
//! Every target must return on any input: a panic (or an abort: stack overflow, out of memory)
//! is a bug in the code under test, never in the target. Besides not panicking, the targets
//! check properties that must hold for every accepted input (a parsed selector prints to a
//! string that parses back to it, a token that does not carry our signature never verifies, an
//! unknown tenant is a 404).
//!
//! Inputs that hold several documents separate them with a NUL byte (JSON and YAML text never
//! contain one); a leading byte picks variants (HTTP method, schema definition).

use std::sync::{Arc, OnceLock};

use fabrik_apiserver::auth::{Caller, SigningKey, UserInfo};
use fabrik_apiserver::handler::RequestBody;
use fabrik_apiserver::negotiation::{self, BodyType};
use fabrik_apiserver::request_info;
use fabrik_apiserver::router::Router;
use fabrik_apiserver::server::{ApiServer, Settings};
use fabrik_machinery::apply::{self as ssa, FieldSet, WriteContext};
use fabrik_machinery::fields::FieldSelector;
use fabrik_machinery::labels::Selector;
use fabrik_machinery::patch::{self, PatchSchema};
use fabrik_machinery::quantity::Quantity;
use fabrik_openapi::{Definitions, InlineSchema};
use serde_json::Value;

/// A fuzz target: takes any bytes, returns on every input.
pub type Target = fn(&[u8]);

/// The targets by name: the names of `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("request_path", request_path),
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("patch", patch),
    ("managed_fields", managed_fields),
    ("quantity", quantity),
    ("protobuf", protobuf),
    ("body_decode", body_decode),
    ("jwt", jwt),
];

/// The leading byte and the rest of an input.
fn split_selector(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((sel, rest)) => (*sel, rest),
        None => (0, data),
    }
}

/// Up to `n` NUL-separated parts.
fn documents(data: &[u8], n: usize) -> Vec<&[u8]> {
    data.splitn(n, |b| *b == 0).collect()
}

fn json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

// --- request paths and tenant routing -------------------------------------------------------

const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "CONNECT",
];

/// The tenant the routing target serves (there is exactly one, `t`).
const TENANT: &str = "t";

struct Served {
    runtime: tokio::runtime::Runtime,
    router: Arc<Router>,
    server: Arc<ApiServer>,
    // Kept for as long as the process runs: the store lives in it, and dropping the sender
    // would stop the server's watches.
    _dir: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

/// One tenant API server over a bootstrapped store, behind a tenants-only router.
fn served() -> &'static Served {
    static SERVED: OnceLock<Served> = OnceLock::new();
    SERVED.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let server = runtime.block_on(async {
            let backend = fabrik_store::SledBackend::open(fabrik_store::SledConfig::new(
                dir.path().join("db"),
            ))
            .expect("a sled store");
            let store: Arc<dyn fabrik_store::Store> =
                Arc::new(backend.keyspace(TENANT).expect("a keyspace"));
            let settings = Settings::default();
            let authz = fabrik_apiserver::rbac::Authorizer::default();
            let registry = Arc::new(fabrik_apiserver::cluster::registry(
                store,
                &settings,
                &authz,
                [],
            ));
            fabrik_apiserver::cluster::bootstrap(&registry)
                .await
                .expect("bootstrap");
            ApiServer::new(registry, authz, settings, stop_rx).expect("an API server")
        });
        let router = Router::tenants_only();
        router.add_tenant(TENANT, server.clone(), "");
        Served {
            runtime,
            router,
            server,
            _dir: dir,
            _stop: stop,
        }
    })
}

fn empty_body() -> RequestBody {
    use http_body_util::BodyExt;
    http_body_util::Empty::<bytes::Bytes>::new()
        .map_err(|never| -> Box<dyn std::error::Error + Send + Sync> { match never {} })
        .boxed()
}

fn request(method: &str, uri: &http::Uri) -> Option<http::Request<RequestBody>> {
    http::Request::builder()
        .method(method)
        .uri(uri.clone())
        .body(empty_body())
        .ok()
}

/// A request line (`<method byte><path>[?<query>]`): parsed into what it asks for as upstream's
/// RequestInfo does, routed by the tenant router without credentials (a path naming
/// any other tenant must be a 404 or 401), and, for reads that cannot block (no watch, no follow), served
/// to a cluster admin so that the query (selectors, limit, continue, resourceVersion) and the
/// resource lookup are exercised too.
pub fn request_path(data: &[u8]) {
    let (sel, rest) = split_selector(data);
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let method_name = METHODS[usize::from(sel) % METHODS.len()];
    let Ok(method) = http::Method::from_bytes(method_name.as_bytes()) else {
        return;
    };
    let path = text.split_once('?').map_or(text, |(p, _)| p);
    for watch in [false, true] {
        if let Ok(request_info::Route::Resource(r)) = request_info::parse(&method, path, watch) {
            // Storage keys are built from these: one segment each, never a traversal.
            for seg in [&r.namespace, &r.name, &r.subresource]
                .into_iter()
                .flatten()
            {
                assert!(
                    !seg.is_empty() && !seg.contains('/') && seg != "." && seg != "..",
                    "{path:?} gave the segment {seg:?}"
                );
            }
        }
    }
    let Ok(uri) = text.parse::<http::Uri>() else {
        return;
    };
    let served = served();
    let Some(req) = request(method_name, &uri) else {
        return;
    };
    let resp = served.runtime.block_on(served.router.handle(req, None));
    let uri_path = uri.path();
    if let Some(rest) = uri_path.strip_prefix("/clusters/") {
        let name = rest.split_once('/').map_or(rest, |(n, _)| n);
        // No cluster answers for a tenant that does not exist: not found, or (so that
        // anonymous callers cannot probe which tenants exist) unauthorized.
        if name != TENANT {
            assert!(
                matches!(resp.status().as_u16(), 401 | 404),
                "{uri_path:?} answered {} without a cluster",
                resp.status()
            );
        }
    }
    drop(resp);
    // The admin path: reads only, and nothing that can wait for events.
    let lower = text.to_ascii_lowercase();
    if method_name != "GET" || lower.contains("watch") || lower.contains("follow") {
        return;
    }
    let Some(req) = request(method_name, &uri) else {
        return;
    };
    let admin = UserInfo {
        name: "fuzz-admin".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
        ..UserInfo::default()
    };
    let resp = served.runtime.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            served.server.clone().handle(req, Caller::Trusted(admin)),
        )
        .await
    });
    assert!(resp.is_ok(), "GET {text:?} did not answer within 5 s");
}

// --- selectors ------------------------------------------------------------------------------

/// A label selector string (`labelSelector=`), and a `metav1.LabelSelector` object. What
/// parses prints stably, and matching any label map must not fail.
pub fn label_selector(data: &[u8]) {
    let (text, labels) = match documents(data, 2).as_slice() {
        [t, l] => (*t, json(l)),
        [t] => (*t, None),
        _ => return,
    };
    let labels = labels.as_ref().and_then(Value::as_object);
    if let Ok(s) = std::str::from_utf8(text) {
        if let Ok(sel) = Selector::parse(s) {
            // Printing is stable: what the printed form parses to prints the same. (Not
            // always the same selector: as upstream, `a in (,)` holds the empty value and
            // prints as `a in ()`, which does not parse.)
            let printed = sel.to_string();
            if let Ok(again) = Selector::parse(&printed) {
                assert_eq!(again.to_string(), printed, "{s:?} printed as {printed:?}");
            }
            let _ = sel.matches(labels);
        }
    }
    if let Some(v) = json(text) {
        if let Ok(sel) = Selector::from_label_selector(&v) {
            let _ = sel.matches(labels);
            let _ = sel.to_string();
        }
    }
}

/// A field selector string (`fieldSelector=`): what parses prints to the same terms, and
/// matching through a getter over an arbitrary object does not fail.
pub fn field_selector(data: &[u8]) {
    let (text, object) = match documents(data, 2).as_slice() {
        [t, o] => (*t, json(o)),
        [t] => (*t, None),
        _ => return,
    };
    let Ok(s) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(sel) = FieldSelector::parse(s) else {
        return;
    };
    // The printed form parses to the same terms (upstream sorts the terms as written, so
    // `=9,==` and its printed form `=9,=` list them in another order).
    let printed = sel.to_string();
    match FieldSelector::parse(&printed) {
        Ok(again) => {
            let mut a: Vec<String> = again.requirements().iter().map(|r| r.to_string()).collect();
            let mut b: Vec<String> = sel.requirements().iter().map(|r| r.to_string()).collect();
            a.sort();
            b.sort();
            assert_eq!(a, b, "{s:?} printed as {printed:?}");
        }
        Err(e) => panic!("{s:?} printed as {printed:?}, which does not parse: {e}"),
    }
    let object = object.unwrap_or(Value::Null);
    let get = |field: &str| -> Option<String> {
        let pointer = format!("/{}", field.replace('.', "/"));
        object.pointer(&pointer).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    let _ = sel.matches(&get);
    for r in sel.requirements() {
        let _ = sel.exact_match(&r.to_string());
    }
}

// --- patches and server-side apply ----------------------------------------------------------

/// The built-in definitions the patch and apply targets type objects with; the last slot
/// means "the third document is a CRD's inline schema" (tenant-supplied too).
const DEFINITIONS: [&str; 8] = [
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.networking.v1.Ingress",
    "io.k8s.api.discovery.v1.EndpointSlice",
    "",
    "inline",
];

/// The schema and definition a leading byte picks (`inline`: `schema` as a CRD's schema).
fn schema_for(sel: u8, schema: Option<Value>) -> (Box<dyn PatchSchema>, String) {
    match DEFINITIONS[usize::from(sel) % DEFINITIONS.len()] {
        "inline" => {
            let root = schema.unwrap_or_else(
                || serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
            let inline = InlineSchema::new("fuzz.example.com/v1/Thing", root);
            let def = inline.root_definition();
            (Box::new(inline), def)
        }
        def => (Box::new(BuiltinSchema), def.to_string()),
    }
}

/// The built-in definitions, as a boxed schema.
struct BuiltinSchema;

impl PatchSchema for BuiltinSchema {
    fn field(
        &self,
        definition: &str,
        field: &str,
    ) -> Option<fabrik_machinery::patch::FieldPatchInfo> {
        PatchSchema::field(Definitions::builtin(), definition, field)
    }
}

/// `<definition byte><object>\0<patch>[\0<inline schema>]`: the patch applied as a JSON patch,
/// a merge patch and a strategic merge patch.
pub fn patch(data: &[u8]) {
    let (sel, rest) = split_selector(data);
    let docs = documents(rest, 3);
    let (Some(doc), Some(p)) = (
        docs.first().and_then(|d| json(d)),
        docs.get(1).and_then(|d| json(d)),
    ) else {
        return;
    };
    let schema = docs.get(2).and_then(|d| json(d));
    if let Ok(out) = patch::json_patch(&doc, &p) {
        // What a patch produces is stored and read back by the same decoder.
        let text = serde_json::to_vec(&out).expect("a patched object serializes");
        assert!(
            serde_json::from_slice::<Value>(&text).is_ok(),
            "a JSON patch produced an object the API server cannot read back"
        );
    }
    let merged = patch::merge_patch(&doc, &p);
    let _ = serde_json::to_vec(&merged);
    let (schema, def) = schema_for(sel, schema);
    if let Ok(out) = patch::strategic_merge_patch(&doc, &p, schema.as_ref(), &def) {
        let _ = serde_json::to_vec(&out);
    }
}

/// `<byte><live object>\0<applied configuration>[\0<inline schema>]`: managedFields decoded
/// from both (field sets print back to the same set), the field set of the configuration,
/// server-side apply of it over the live object (forced when the byte's high bit is set), and
/// the managedFields bookkeeping of an update from one to the other.
pub fn managed_fields(data: &[u8]) {
    let (sel, rest) = split_selector(data);
    let docs = documents(rest, 3);
    let (Some(live), Some(config)) = (
        docs.first().and_then(|d| json(d)),
        docs.get(1).and_then(|d| json(d)),
    ) else {
        return;
    };
    for object in [&live, &config] {
        if let Ok(entries) = ssa::managed_fields_of(object) {
            for e in entries {
                let printed = e.fields.to_fields_v1();
                match FieldSet::from_fields_v1(&printed) {
                    Ok(again) => {
                        assert_eq!(again, e.fields, "fieldsV1 {printed} did not round-trip")
                    }
                    Err(err) => panic!("fieldsV1 {printed} does not parse back: {err}"),
                }
                let _ = e.to_json();
            }
        }
        if let Ok(set) = FieldSet::from_fields_v1(object) {
            let printed = set.to_fields_v1();
            assert_eq!(
                FieldSet::from_fields_v1(&printed).ok().as_ref(),
                Some(&set),
                "fieldsV1 {printed} did not round-trip"
            );
        }
    }
    let schema = docs.get(2).and_then(|d| json(d));
    let (schema, def) = schema_for(sel & 0x7f, schema);
    let _ = ssa::field_set(&config, schema.as_ref(), &def);
    let subresource = match sel % 3 {
        0 => None,
        1 => Some("status"),
        _ => Some("scale"),
    };
    let ctx = WriteContext {
        schema: schema.as_ref(),
        definition: &def,
        api_version: "v1",
        subresource,
        now: "2026-01-01T00:00:00Z",
    };
    let _ = ssa::apply(Some(&live), &config, "fuzz", sel & 0x80 != 0, &ctx);
    let _ = ssa::apply(None, &config, "fuzz", false, &ctx);
    let _ = ssa::update_managed_fields(Some(&live), &config, "fuzz-update", &ctx);
}

// --- quantities -----------------------------------------------------------------------------

/// A quantity string: what parses prints (in upstream's canonical form) to a string that parses
/// to the same amount; as a JSON value too.
pub fn quantity(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = s.parse::<Quantity>() {
        let printed = q.to_string();
        match printed.parse::<Quantity>() {
            Ok(again) => assert_eq!(again, q, "{s:?} printed as {printed:?}"),
            Err(e) => panic!("{s:?} printed as {printed:?}, which does not parse: {e}"),
        }
        let _ = (
            q.milli_value(),
            q.value(),
            q.is_negative(),
            q.checked_add(&q),
        );
    }
    if let Some(v) = json(data) {
        let _ = Quantity::from_json(&v);
    }
}

// --- request bodies -------------------------------------------------------------------------

/// A `application/vnd.kubernetes.protobuf` request body: decodes to an object with its type,
/// or an error.
pub fn protobuf(data: &[u8]) {
    let mut body = fabrik_openapi::K8S_PROTOBUF_MAGIC.to_vec();
    body.extend_from_slice(data);
    if let Ok(v) = fabrik_openapi::decode_k8s_protobuf(&body) {
        assert!(
            v.is_object(),
            "a decoded protobuf body is not an object: {v}"
        );
        let _ = serde_json::to_vec(&v);
    }
    // As sent, too: without the magic it must be refused.
    let decoded = negotiation::decode_body(data, BodyType::Protobuf);
    assert!(
        decoded.is_err() || data.starts_with(fabrik_openapi::K8S_PROTOBUF_MAGIC),
        "a body without the protobuf magic decoded"
    );
}

/// A request body as JSON, as YAML and as an apply configuration, and the content type that
/// picks the decoder (`<content type>\0<body>` when a NUL is present).
pub fn body_decode(data: &[u8]) {
    let (content_type, body) = match documents(data, 2).as_slice() {
        [c, b] => (std::str::from_utf8(c).ok(), *b),
        [b] => (None, *b),
        _ => return,
    };
    if let Some(ct) = content_type {
        if let Ok(ty) = negotiation::body_type(Some(ct)) {
            let _ = negotiation::decode_body(body, ty);
        }
    }
    for ty in [BodyType::Json, BodyType::Yaml, BodyType::ApplyPatch] {
        if let Ok(v) = negotiation::decode_body(body, ty) {
            // What was decoded is encoded again when stored.
            let _ = serde_json::to_vec(&v);
        }
    }
}

// --- tokens ---------------------------------------------------------------------------------

/// A bearer token: split into its parts, its issuer peeked, and verified against a key of this
/// process — which nothing but this process can sign for, so it must never verify.
pub fn jwt(data: &[u8]) {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let key = KEY.get_or_init(|| SigningKey::generate().expect("a signing key"));
    let _ = fabrik_apiserver::auth::jwt::Parts::split(token);
    let _ = fabrik_apiserver::auth::jwt::peek_issuer(token);
    assert!(
        key.verify(token).is_err(),
        "a token not signed by this key verified: {token:?}"
    );
}
