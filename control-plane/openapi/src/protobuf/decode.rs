//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) into
//! the JSON object a JSON client would have sent.
//!
//! A body is the magic `k8s\0` followed by a `runtime.Unknown` message whose `typeMeta` names
//! the kind and whose `raw` field holds the typed message. The field tables of the typed
//! messages come from `data/k8s-proto-fields.json` (written by `scripts/gen-proto-fields.py`
//! from k8s-pb's prost sources); JSON property names come from the OpenAPI definitions, with
//! the generator's names (k8s-openapi's spelling) for messages Fabrik has no definition of.
//! Structs that Go embeds inline (`Volume.volumeSource`, `Probe.handler`, the
//! `localObjectReference` of key selectors) are nested messages on the wire and are flattened
//! into their parent object, as their JSON form is.
//!
//! Go writes every non-pointer field, so zero scalars arrive whether or not the client set
//! them. Like the JSON a Go client writes (`omitempty`), empty strings, zero numbers and
//! `false` are left out, except for the pointer fields listed in [`KEEP_ZERO`], whose zero
//! differs from their default. Empty messages stay as `{}`, as Go writes them.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::Definitions;

/// The four bytes in front of every Kubernetes protobuf body.
pub const K8S_PROTOBUF_MAGIC: &[u8; 4] = b"k8s\x00";

/// Deepest message nesting accepted.
const MAX_DEPTH: usize = 64;

/// Name of the envelope message.
const UNKNOWN: &str = "io.k8s.apimachinery.pkg.runtime.Unknown";

/// The generated field tables.
const FIELDS_JSON: &str = include_str!("../../data/k8s-proto-fields.json");

/// Name of the CRD schema message.
const JSON_SCHEMA_PROPS: &str =
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps";

/// Fields whose zero value (`0`, `false`, `""`) is kept: pointers in Go whose zero is not
/// their default, so leaving them out would change the object.
const KEEP_ZERO: &[(&str, &str)] = &[
    ("io.k8s.api.core.v1.PodSpec", "automountServiceAccountToken"),
    ("io.k8s.api.core.v1.PodSpec", "enableServiceLinks"),
    (
        "io.k8s.api.core.v1.PodSpec",
        "terminationGracePeriodSeconds",
    ),
    ("io.k8s.api.core.v1.PodSpec", "activeDeadlineSeconds"),
    ("io.k8s.api.core.v1.PodSpec", "priority"),
    ("io.k8s.api.core.v1.PodSpec", "hostUsers"),
    (
        "io.k8s.api.core.v1.ServiceAccount",
        "automountServiceAccountToken",
    ),
    ("io.k8s.api.core.v1.PodSecurityContext", "runAsUser"),
    ("io.k8s.api.core.v1.PodSecurityContext", "runAsGroup"),
    ("io.k8s.api.core.v1.PodSecurityContext", "fsGroup"),
    ("io.k8s.api.core.v1.SecurityContext", "runAsUser"),
    ("io.k8s.api.core.v1.SecurityContext", "runAsGroup"),
    (
        "io.k8s.api.core.v1.SecurityContext",
        "allowPrivilegeEscalation",
    ),
    (
        "io.k8s.api.core.v1.ServiceSpec",
        "allocateLoadBalancerNodePorts",
    ),
    (
        "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
        "storageClassName",
    ),
    ("io.k8s.api.core.v1.SecretVolumeSource", "defaultMode"),
    ("io.k8s.api.core.v1.ConfigMapVolumeSource", "defaultMode"),
    ("io.k8s.api.core.v1.ProjectedVolumeSource", "defaultMode"),
    ("io.k8s.api.core.v1.DownwardAPIVolumeSource", "defaultMode"),
    ("io.k8s.api.core.v1.KeyToPath", "mode"),
    ("io.k8s.api.apps.v1.DeploymentSpec", "replicas"),
    ("io.k8s.api.apps.v1.DeploymentSpec", "revisionHistoryLimit"),
    (
        "io.k8s.api.apps.v1.DeploymentSpec",
        "progressDeadlineSeconds",
    ),
    ("io.k8s.api.apps.v1.ReplicaSetSpec", "replicas"),
    ("io.k8s.api.apps.v1.StatefulSetSpec", "replicas"),
    ("io.k8s.api.apps.v1.StatefulSetSpec", "revisionHistoryLimit"),
    ("io.k8s.api.apps.v1.DaemonSetSpec", "revisionHistoryLimit"),
    ("io.k8s.api.batch.v1.JobSpec", "parallelism"),
    ("io.k8s.api.batch.v1.JobSpec", "completions"),
    ("io.k8s.api.batch.v1.JobSpec", "activeDeadlineSeconds"),
    ("io.k8s.api.batch.v1.JobSpec", "backoffLimit"),
    ("io.k8s.api.batch.v1.JobSpec", "backoffLimitPerIndex"),
    ("io.k8s.api.batch.v1.JobSpec", "maxFailedIndexes"),
    ("io.k8s.api.batch.v1.JobSpec", "ttlSecondsAfterFinished"),
    ("io.k8s.api.batch.v1.CronJobSpec", "startingDeadlineSeconds"),
    (
        "io.k8s.api.batch.v1.CronJobSpec",
        "successfulJobsHistoryLimit",
    ),
    ("io.k8s.api.batch.v1.CronJobSpec", "failedJobsHistoryLimit"),
    (
        "io.k8s.api.autoscaling.v1.HorizontalPodAutoscalerSpec",
        "minReplicas",
    ),
    (
        "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerSpec",
        "minReplicas",
    ),
    (
        "io.k8s.api.autoscaling.v2.HPAScalingRules",
        "stabilizationWindowSeconds",
    ),
    (
        "io.k8s.api.autoscaling.v2.MetricTarget",
        "averageUtilization",
    ),
    (JSON_SCHEMA_PROPS, "maximum"),
    (JSON_SCHEMA_PROPS, "minimum"),
    (JSON_SCHEMA_PROPS, "maxLength"),
    (JSON_SCHEMA_PROPS, "minLength"),
    (JSON_SCHEMA_PROPS, "maxItems"),
    (JSON_SCHEMA_PROPS, "minItems"),
    (JSON_SCHEMA_PROPS, "maxProperties"),
    (JSON_SCHEMA_PROPS, "minProperties"),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
        "gracePeriodSeconds",
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
        "orphanDependents",
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "deletionGracePeriodSeconds",
    ),
];

/// Fields left out when they hold the zero `IntOrString` (a non-pointer Go field that the
/// server defaults when unset).
const DROP_ZERO_INT_OR_STRING: &[(&str, &str)] =
    &[("io.k8s.api.core.v1.ServicePort", "targetPort")];

/// API group (empty for core) and version served by each protobuf package.
const PACKAGES: &[(&str, &str, &str)] = &[
    ("", "v1", "io.k8s.api.core.v1"),
    ("apps", "v1", "io.k8s.api.apps.v1"),
    ("batch", "v1", "io.k8s.api.batch.v1"),
    ("rbac.authorization.k8s.io", "v1", "io.k8s.api.rbac.v1"),
    ("coordination.k8s.io", "v1", "io.k8s.api.coordination.v1"),
    ("discovery.k8s.io", "v1", "io.k8s.api.discovery.v1"),
    ("events.k8s.io", "v1", "io.k8s.api.events.v1"),
    ("networking.k8s.io", "v1", "io.k8s.api.networking.v1"),
    ("policy", "v1", "io.k8s.api.policy.v1"),
    ("scheduling.k8s.io", "v1", "io.k8s.api.scheduling.v1"),
    ("storage.k8s.io", "v1", "io.k8s.api.storage.v1"),
    ("node.k8s.io", "v1", "io.k8s.api.node.v1"),
    ("resource.k8s.io", "v1", "io.k8s.api.resource.v1"),
    ("autoscaling", "v1", "io.k8s.api.autoscaling.v1"),
    ("autoscaling", "v2", "io.k8s.api.autoscaling.v2"),
    (
        "admissionregistration.k8s.io",
        "v1",
        "io.k8s.api.admissionregistration.v1",
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1",
    ),
    (
        "authentication.k8s.io",
        "v1",
        "io.k8s.api.authentication.v1",
    ),
    ("authorization.k8s.io", "v1", "io.k8s.api.authorization.v1"),
    (
        "apiextensions.k8s.io",
        "v1",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1",
    ),
    ("meta.k8s.io", "v1", "io.k8s.apimachinery.pkg.apis.meta.v1"),
];

/// Package of the kinds every group version serves (`DeleteOptions`, `Status`, ...).
const META_PACKAGE: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";

/// What can be wrong with a protobuf body.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtobufDecodeError {
    /// The body does not start with `k8s\0`.
    #[error("protobuf body does not start with the k8s magic prefix")]
    MissingMagic,
    /// A varint, length or fixed-size value runs past the end of its message.
    #[error("truncated protobuf data in {message}")]
    Truncated {
        /// The message being read.
        message: String,
    },
    /// A varint longer than ten bytes.
    #[error("malformed varint in {message}")]
    BadVarint {
        /// The message being read.
        message: String,
    },
    /// A field key with field number 0, an unknown wire type or a (deprecated) group.
    #[error("invalid field key {key} in {message}")]
    BadKey {
        /// The message being read.
        message: String,
        /// The raw key.
        key: u64,
    },
    /// A known field arrived with a wire type its type does not allow.
    #[error("field {field} of {message} has wire type {wire}, expected {expected}")]
    WrongWireType {
        /// The message being read.
        message: String,
        /// The field's JSON name.
        field: String,
        /// The wire type received.
        wire: u8,
        /// The wire type expected.
        expected: u8,
    },
    /// Messages nested deeper than the limit.
    #[error("protobuf messages nested deeper than {MAX_DEPTH}")]
    TooDeep,
    /// The envelope names no kind or API version.
    #[error("protobuf envelope carries no apiVersion/kind")]
    MissingTypeMeta,
    /// The envelope names a kind with no known protobuf schema.
    #[error("no protobuf schema for {api_version}, Kind={kind}")]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The envelope's content encoding is not the identity.
    #[error("unsupported protobuf content encoding {0:?}")]
    UnsupportedEncoding(String),
    /// A field refers to a message type the tables do not have.
    #[error("unknown protobuf message type {0}")]
    UnknownMessage(String),
    /// A string field holds bytes that are not UTF-8.
    #[error("field {field} of {message} is not valid UTF-8")]
    InvalidUtf8 {
        /// The message being read.
        message: String,
        /// The field's JSON name.
        field: String,
    },
    /// A field holds a value its JSON form cannot express.
    #[error("invalid value in {message}: {reason}")]
    InvalidValue {
        /// The message being read.
        message: String,
        /// What is wrong.
        reason: String,
    },
    /// The embedded field tables could not be read (a build problem, not a bad body).
    #[error("protobuf field tables are invalid: {0}")]
    Tables(String),
}

type Result<T> = std::result::Result<T, ProtobufDecodeError>;

/// Decodes a `application/vnd.kubernetes.protobuf` request body into the JSON object (with
/// apiVersion and kind from the envelope).
pub fn decode_k8s_protobuf(body: &[u8]) -> Result<Value> {
    let payload = body
        .strip_prefix(K8S_PROTOBUF_MAGIC.as_slice())
        .ok_or(ProtobufDecodeError::MissingMagic)?;
    let tables = tables()?;
    let envelope = Envelope::read(payload)?;
    let (api_version, kind) = match (envelope.api_version, envelope.kind) {
        (Some(a), Some(k)) if !a.is_empty() && !k.is_empty() => (a, k),
        _ => return Err(ProtobufDecodeError::MissingTypeMeta),
    };
    if !envelope.content_encoding.is_empty() {
        return Err(ProtobufDecodeError::UnsupportedEncoding(
            envelope.content_encoding,
        ));
    }
    let message = tables.message_for(&api_version, &kind).ok_or_else(|| {
        ProtobufDecodeError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        }
    })?;
    let mut object = Map::new();
    object.insert("apiVersion".to_owned(), Value::String(api_version));
    object.insert("kind".to_owned(), Value::String(kind));
    let decoder = Decoder { tables };
    if let Value::Object(fields) = decoder.message(message, envelope.raw, 1)? {
        for (k, v) in fields {
            if k != "apiVersion" && k != "kind" {
                object.insert(k, v);
            }
        }
    }
    Ok(Value::Object(object))
}

/// The parts of `runtime.Unknown` the decoder needs.
struct Envelope<'a> {
    api_version: Option<String>,
    kind: Option<String>,
    raw: &'a [u8],
    content_encoding: String,
}

impl<'a> Envelope<'a> {
    fn read(buf: &'a [u8]) -> Result<Envelope<'a>> {
        let mut env = Envelope {
            api_version: None,
            kind: None,
            raw: &[],
            content_encoding: String::new(),
        };
        let mut r = Reader::new(buf, UNKNOWN);
        while let Some((field, wire)) = r.key()? {
            match (field, wire) {
                (1, LEN) => {
                    let meta = r.len_delimited()?;
                    let mut m = Reader::new(meta, "io.k8s.apimachinery.pkg.runtime.TypeMeta");
                    while let Some((f, w)) = m.key()? {
                        match (f, w) {
                            (1, LEN) => env.api_version = Some(m.string("apiVersion")?),
                            (2, LEN) => env.kind = Some(m.string("kind")?),
                            _ => m.skip(w)?,
                        }
                    }
                }
                (2, LEN) => env.raw = r.len_delimited()?,
                (3, LEN) => env.content_encoding = r.string("contentEncoding")?,
                // contentType: the raw bytes are protobuf whatever it says.
                (4, LEN) => r.skip(LEN)?,
                (1..=4, _) => {
                    return Err(ProtobufDecodeError::WrongWireType {
                        message: UNKNOWN.to_owned(),
                        field: field.to_string(),
                        wire,
                        expected: LEN,
                    })
                }
                _ => r.skip(wire)?,
            }
        }
        Ok(env)
    }
}

// ---------------------------------------------------------------------------------------------
// Wire reading.

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// A cursor over one message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    message: &'a str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], message: &'a str) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            message,
        }
    }

    fn truncated(&self) -> ProtobufDecodeError {
        ProtobufDecodeError::Truncated {
            message: self.message.to_owned(),
        }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = *self.buf.get(self.pos).ok_or_else(|| self.truncated())?;
            self.pos += 1;
            if i == 9 && byte > 1 {
                break;
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(ProtobufDecodeError::BadVarint {
            message: self.message.to_owned(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.truncated())?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.truncated())?;
        self.pos = end;
        Ok(bytes)
    }

    fn fixed64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn fixed32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn len_delimited(&mut self) -> Result<&'a [u8]> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| self.truncated())?;
        self.take(len)
    }

    fn string(&mut self, field: &str) -> Result<String> {
        let bytes = self.len_delimited()?;
        utf8(bytes, self.message, field)
    }

    /// The next field key, `None` at the end of the message.
    fn key(&mut self) -> Result<Option<(u32, u8)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = (key & 7) as u8;
        let field = u32::try_from(key >> 3).unwrap_or(0);
        if field == 0 || !matches!(wire, VARINT | FIXED64 | LEN | FIXED32) {
            return Err(ProtobufDecodeError::BadKey {
                message: self.message.to_owned(),
                key,
            });
        }
        Ok(Some((field, wire)))
    }

    /// Skips the value of an unknown field.
    fn skip(&mut self, wire: u8) -> Result<()> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.len_delimited().map(drop),
            _ => self.take(4).map(drop),
        }
    }
}

fn utf8(bytes: &[u8], message: &str, field: &str) -> Result<String> {
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| ProtobufDecodeError::InvalidUtf8 {
            message: message.to_owned(),
            field: field.to_owned(),
        })
}

// ---------------------------------------------------------------------------------------------
// Field tables.

/// Scalar and message kinds of the generated tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Double,
    Float,
    Message,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "string" => Kind::String,
            "bytes" => Kind::Bytes,
            "bool" => Kind::Bool,
            "int32" | "enumeration" | "enum" => Kind::Int32,
            "int64" => Kind::Int64,
            "uint32" => Kind::Uint32,
            "uint64" => Kind::Uint64,
            "sint32" => Kind::Sint32,
            "sint64" => Kind::Sint64,
            "double" => Kind::Double,
            "float" => Kind::Float,
            "message" => Kind::Message,
            _ => return None,
        })
    }

    /// The wire type of one (unpacked) value.
    fn wire(self) -> u8 {
        match self {
            Kind::String | Kind::Bytes | Kind::Message => LEN,
            Kind::Double => FIXED64,
            Kind::Float => FIXED32,
            _ => VARINT,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    Optional,
    Repeated,
    Map,
}

/// One field of a message, ready for decoding.
#[derive(Debug)]
struct Field {
    json: String,
    kind: Kind,
    /// Index of the message type (for messages and maps of messages).
    message: Option<usize>,
    label: Label,
    /// Kind of the key (maps only).
    key: Kind,
    keep_zero: bool,
    drop_zero_int_or_string: bool,
    /// A struct Go embeds with `json:",inline"`: its fields belong to this object.
    inline: bool,
}

/// Messages whose JSON form is not an object of their fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    Time,
    MicroTime,
    Duration,
    Quantity,
    IntOrString,
    /// `RawExtension`, `FieldsV1`, apiextensions `JSON`: field 1 holds JSON bytes.
    EmbeddedJson,
    /// `Verbs`, `ExtraValue`: field 1 holds the strings of a JSON array.
    StringList,
    SchemaOrArray,
    SchemaOrBool,
    SchemaOrStringArray,
}

#[derive(Debug)]
struct Message {
    name: String,
    fields: HashMap<u32, Field>,
    special: Option<Special>,
}

#[derive(Debug)]
struct Tables {
    messages: Vec<Message>,
    by_name: HashMap<String, usize>,
}

/// One row of the data file: name, kind, message type, label, map key/value, JSON name hint.
type RawField = (
    String,
    String,
    Option<String>,
    String,
    Option<(String, String, Option<String>)>,
    String,
);

fn special(name: &str) -> Option<Special> {
    const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";
    const EXT: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.";
    if let Some(short) = name.strip_prefix(META) {
        return match short {
            "Time" => Some(Special::Time),
            "MicroTime" => Some(Special::MicroTime),
            "Duration" => Some(Special::Duration),
            "FieldsV1" => Some(Special::EmbeddedJson),
            "Verbs" => Some(Special::StringList),
            _ => None,
        };
    }
    if let Some(short) = name.strip_prefix(EXT) {
        return match short {
            "JSON" => Some(Special::EmbeddedJson),
            "JSONSchemaPropsOrArray" => Some(Special::SchemaOrArray),
            "JSONSchemaPropsOrBool" => Some(Special::SchemaOrBool),
            "JSONSchemaPropsOrStringArray" => Some(Special::SchemaOrStringArray),
            _ => None,
        };
    }
    match name {
        "io.k8s.apimachinery.pkg.api.resource.Quantity" => Some(Special::Quantity),
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString" => Some(Special::IntOrString),
        "io.k8s.apimachinery.pkg.runtime.RawExtension" => Some(Special::EmbeddedJson),
        "io.k8s.api.authentication.v1.ExtraValue" | "io.k8s.api.authorization.v1.ExtraValue" => {
            Some(Special::StringList)
        }
        _ => None,
    }
}

/// Lower-cased, with everything but letters and digits removed: `host_ip` and `hostIP`, or
/// `x_kubernetes_list_type` and `x-kubernetes-list-type`, meet here.
fn normalize(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Finds the fields Go inlines (`Volume.volumeSource`, `Probe.handler`, ...): message fields
/// that are no property of their message's definition while every field of the message they
/// hold is. Returns the (message, field) pairs, and for inlined messages with no definition of
/// their own the property names of the definition they are inlined into.
#[allow(clippy::type_complexity)]
fn find_inlined(
    definitions: &Definitions,
    raw: &[(String, HashMap<String, RawField>)],
) -> (
    std::collections::HashSet<(String, String)>,
    HashMap<String, HashMap<String, String>>,
) {
    let by_name: HashMap<&str, &HashMap<String, RawField>> =
        raw.iter().map(|(n, f)| (n.as_str(), f)).collect();
    let mut inline = std::collections::HashSet::new();
    let mut inherited = HashMap::new();
    for (name, fields) in raw {
        let props = json_names(definitions, name);
        if props.is_empty() {
            continue;
        }
        for (snake, kind, type_name, label, _, _) in fields.values() {
            if kind != "message" || label != "optional" || props.contains_key(&normalize(snake)) {
                continue;
            }
            let Some(inner) = type_name.as_deref().and_then(|t| by_name.get(t)) else {
                continue;
            };
            let all_inside = !inner.is_empty()
                && inner
                    .values()
                    .all(|(s, ..)| props.contains_key(&normalize(s)));
            if all_inside {
                inline.insert((name.clone(), snake.clone()));
                if let Some(t) = type_name {
                    if definitions.get(t).is_none() {
                        inherited.insert(t.clone(), props.clone());
                    }
                }
            }
        }
    }
    (inline, inherited)
}

/// The JSON name of each field of `message`, from the properties of its OpenAPI definition.
fn json_names(definitions: &Definitions, message: &str) -> HashMap<String, String> {
    definitions
        .get(message)
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
        .map(|props| props.keys().map(|k| (normalize(k), k.clone())).collect())
        .unwrap_or_default()
}

impl Tables {
    fn load(definitions: &Definitions) -> std::result::Result<Tables, String> {
        let raw: Vec<(String, HashMap<String, RawField>)> =
            serde_json::from_str::<serde_json::Map<String, Value>>(FIELDS_JSON)
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|(name, fields)| {
                    HashMap::<String, RawField>::deserialize(fields)
                        .map(|f| (name, f))
                        .map_err(|e| e.to_string())
                })
                .collect::<std::result::Result<_, _>>()?;
        let by_name: HashMap<String, usize> = raw
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
        let (inline, inherited) = find_inlined(definitions, &raw);
        let mut messages = Vec::with_capacity(raw.len());
        for (name, fields) in raw {
            let mut names = json_names(definitions, &name);
            if names.is_empty() {
                names = inherited.get(&name).cloned().unwrap_or_default();
            }
            let mut table = HashMap::with_capacity(fields.len());
            for (tag, (snake, kind, type_name, label, map, hint)) in fields {
                let tag: u32 = tag
                    .parse()
                    .map_err(|_| format!("{name}: bad tag {tag:?}"))?;
                let Some(kind) = Kind::parse(&kind) else {
                    // A kind this decoder does not know: treated as an unknown field.
                    continue;
                };
                let label = match label.as_str() {
                    "optional" => Label::Optional,
                    "repeated" => Label::Repeated,
                    "map" => Label::Map,
                    other => return Err(format!("{name}.{snake}: bad label {other:?}")),
                };
                let key = match &map {
                    Some((k, _, _)) => Kind::parse(k)
                        .ok_or_else(|| format!("{name}.{snake}: bad map key {k:?}"))?,
                    None => Kind::String,
                };
                let message = match type_name {
                    Some(t) => Some(
                        *by_name
                            .get(&t)
                            .ok_or_else(|| format!("{name}.{snake}: unknown type {t}"))?,
                    ),
                    None if kind == Kind::Message => {
                        return Err(format!("{name}.{snake}: message without a type"))
                    }
                    None => None,
                };
                let json = names.get(&normalize(&snake)).cloned().unwrap_or(hint);
                let inline = inline.contains(&(name.clone(), snake.clone()));
                let keep_zero = KEEP_ZERO.contains(&(name.as_str(), json.as_str()));
                let drop_zero_int_or_string =
                    DROP_ZERO_INT_OR_STRING.contains(&(name.as_str(), json.as_str()));
                table.insert(
                    tag,
                    Field {
                        json,
                        kind,
                        message,
                        label,
                        key,
                        keep_zero,
                        drop_zero_int_or_string,
                        inline,
                    },
                );
            }
            let special = special(&name);
            messages.push(Message {
                name,
                fields: table,
                special,
            });
        }
        Ok(Tables { messages, by_name })
    }

    /// The message holding objects of `apiVersion`/`kind`.
    fn message_for(&self, api_version: &str, kind: &str) -> Option<usize> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let (_, _, package) = PACKAGES
            .iter()
            .find(|(g, v, _)| *g == group && *v == version)?;
        self.by_name
            .get(&format!("{package}.{kind}"))
            .or_else(|| self.by_name.get(&format!("{META_PACKAGE}.{kind}")))
            .copied()
    }
}

fn tables() -> Result<&'static Tables> {
    static TABLES: OnceLock<std::result::Result<Tables, String>> = OnceLock::new();
    TABLES
        .get_or_init(|| Tables::load(Definitions::builtin()))
        .as_ref()
        .map_err(|e| ProtobufDecodeError::Tables(e.clone()))
}

// ---------------------------------------------------------------------------------------------
// Decoding.

struct Decoder {
    tables: &'static Tables,
}

/// A decoded field value before it is placed: `None` when it is left out of the JSON.
type Decoded = Option<Value>;

impl Decoder {
    fn msg(&self, index: usize) -> Result<&'static Message> {
        self.tables
            .messages
            .get(index)
            .ok_or_else(|| ProtobufDecodeError::UnknownMessage(index.to_string()))
    }

    /// Decodes message `index` into its JSON form (`Null` for values that are left out).
    fn message(&self, index: usize, buf: &[u8], depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(ProtobufDecodeError::TooDeep);
        }
        let message = self.msg(index)?;
        if let Some(special) = message.special {
            return self.special(message, special, buf, depth);
        }
        let mut out = Map::new();
        let mut r = Reader::new(buf, &message.name);
        while let Some((tag, wire)) = r.key()? {
            let Some(field) = message.fields.get(&tag) else {
                r.skip(wire)?;
                continue;
            };
            match field.label {
                Label::Optional if field.inline => {
                    self.expect_wire(message, field, wire, LEN)?;
                    let bytes = r.len_delimited()?;
                    let inner = self.message(message_index(message, field)?, bytes, depth + 1)?;
                    if let Value::Object(inner) = inner {
                        out.extend(inner);
                    }
                }
                Label::Optional => {
                    self.expect_wire(message, field, wire, field.kind.wire())?;
                    match self.single(message, field, &mut r, depth)? {
                        Some(v) => {
                            out.insert(field.json.clone(), v);
                        }
                        None => {
                            out.remove(&field.json);
                        }
                    }
                }
                Label::Repeated => {
                    let items = out
                        .entry(field.json.clone())
                        .or_insert_with(|| Value::Array(Vec::new()));
                    let Value::Array(items) = items else {
                        return Err(ProtobufDecodeError::InvalidValue {
                            message: message.name.clone(),
                            reason: format!("{} is both a list and a value", field.json),
                        });
                    };
                    let packable =
                        !matches!(field.kind, Kind::String | Kind::Bytes | Kind::Message);
                    if packable && wire == LEN {
                        let packed = r.len_delimited()?;
                        let mut p = Reader::new(packed, &message.name);
                        while p.pos < packed.len() {
                            items.push(self.scalar(message, field, &mut p)?);
                        }
                    } else {
                        self.expect_wire(message, field, wire, field.kind.wire())?;
                        let v = match field.kind {
                            Kind::Message => {
                                let bytes = r.len_delimited()?;
                                self.message(message_index(message, field)?, bytes, depth + 1)?
                            }
                            _ => self.scalar(message, field, &mut r)?,
                        };
                        items.push(v);
                    }
                }
                Label::Map => {
                    self.expect_wire(message, field, wire, LEN)?;
                    let entry = r.len_delimited()?;
                    let (k, v) = self.map_entry(message, field, entry, depth)?;
                    let map = out
                        .entry(field.json.clone())
                        .or_insert_with(|| Value::Object(Map::new()));
                    let Value::Object(map) = map else {
                        return Err(ProtobufDecodeError::InvalidValue {
                            message: message.name.clone(),
                            reason: format!("{} is both a map and a value", field.json),
                        });
                    };
                    map.insert(k, v);
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn expect_wire(&self, message: &Message, field: &Field, wire: u8, expected: u8) -> Result<()> {
        if wire == expected {
            Ok(())
        } else {
            Err(ProtobufDecodeError::WrongWireType {
                message: message.name.clone(),
                field: field.json.clone(),
                wire,
                expected,
            })
        }
    }

    /// One optional field's value, `None` when it is left out.
    fn single(
        &self,
        message: &Message,
        field: &Field,
        r: &mut Reader<'_>,
        depth: usize,
    ) -> Result<Decoded> {
        if field.kind == Kind::Message {
            let bytes = r.len_delimited()?;
            let v = self.message(message_index(message, field)?, bytes, depth + 1)?;
            if field.drop_zero_int_or_string && v == 0 {
                return Ok(None);
            }
            return Ok(if v.is_null() { None } else { Some(v) });
        }
        let v = self.scalar(message, field, r)?;
        let zero = match &v {
            Value::String(s) => s.is_empty(),
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            _ => false,
        };
        Ok(if zero && !field.keep_zero {
            None
        } else {
            Some(v)
        })
    }

    /// One scalar value of `field.kind`.
    fn scalar(&self, message: &Message, field: &Field, r: &mut Reader<'_>) -> Result<Value> {
        scalar(field.kind, message, &field.json, r)
    }

    fn map_entry(
        &self,
        message: &Message,
        field: &Field,
        entry: &[u8],
        depth: usize,
    ) -> Result<(String, Value)> {
        let mut key = String::new();
        let mut value: Option<Value> = None;
        let mut r = Reader::new(entry, &message.name);
        while let Some((tag, wire)) = r.key()? {
            match tag {
                1 => {
                    self.expect_wire(message, field, wire, field.key.wire())?;
                    key = match scalar(field.key, message, &field.json, &mut r)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                }
                2 => {
                    self.expect_wire(message, field, wire, field.kind.wire())?;
                    value = Some(match field.kind {
                        Kind::Message => {
                            let bytes = r.len_delimited()?;
                            self.message(message_index(message, field)?, bytes, depth + 1)?
                        }
                        _ => self.scalar(message, field, &mut r)?,
                    });
                }
                _ => r.skip(wire)?,
            }
        }
        let value = match value {
            Some(v) => v,
            // An absent value is the type's default.
            None => match field.kind {
                Kind::Message => self.message(message_index(message, field)?, &[], depth + 1)?,
                Kind::String | Kind::Bytes => Value::String(String::new()),
                Kind::Bool => Value::Bool(false),
                _ => Value::from(0),
            },
        };
        Ok((key, value))
    }

    fn special(
        &self,
        message: &Message,
        special: Special,
        buf: &[u8],
        depth: usize,
    ) -> Result<Value> {
        let invalid = |reason: String| ProtobufDecodeError::InvalidValue {
            message: message.name.clone(),
            reason,
        };
        let mut ints: [i64; 3] = [0; 3];
        let mut strings: Vec<String> = Vec::new();
        let mut bytes: &[u8] = &[];
        let mut schema: Option<Value> = None;
        let mut schemas: Vec<Value> = Vec::new();
        let mut allows = false;
        let mut r = Reader::new(buf, &message.name);
        let schema_index = || {
            message
                .fields
                .values()
                .find_map(|f| f.message)
                .ok_or_else(|| ProtobufDecodeError::UnknownMessage(message.name.clone()))
        };
        while let Some((tag, wire)) = r.key()? {
            let wrong = |expected: u8| ProtobufDecodeError::WrongWireType {
                message: message.name.clone(),
                field: tag.to_string(),
                wire,
                expected,
            };
            match (special, tag) {
                (
                    Special::Time | Special::MicroTime | Special::Duration | Special::IntOrString,
                    1 | 2,
                ) if !(special == Special::Duration && tag == 2) => {
                    if wire != VARINT {
                        return Err(wrong(VARINT));
                    }
                    let v = r.varint()? as i64;
                    ints[tag as usize] = if tag == 2 { i64::from(v as i32) } else { v };
                }
                (Special::IntOrString, 3) | (Special::Quantity, 1) => {
                    if wire != LEN {
                        return Err(wrong(LEN));
                    }
                    strings = vec![r.string("value")?];
                }
                (Special::EmbeddedJson, 1) => {
                    if wire != LEN {
                        return Err(wrong(LEN));
                    }
                    bytes = r.len_delimited()?;
                }
                (Special::StringList, 1) | (Special::SchemaOrStringArray, 2) => {
                    if wire != LEN {
                        return Err(wrong(LEN));
                    }
                    strings.push(r.string("items")?);
                }
                (Special::SchemaOrBool, 1) => {
                    if wire != VARINT {
                        return Err(wrong(VARINT));
                    }
                    allows = r.varint()? != 0;
                }
                (Special::SchemaOrArray, 1)
                | (Special::SchemaOrBool, 2)
                | (Special::SchemaOrStringArray, 1) => {
                    if wire != LEN {
                        return Err(wrong(LEN));
                    }
                    let b = r.len_delimited()?;
                    schema = Some(self.message(schema_index()?, b, depth + 1)?);
                }
                (Special::SchemaOrArray, 2) => {
                    if wire != LEN {
                        return Err(wrong(LEN));
                    }
                    let b = r.len_delimited()?;
                    schemas.push(self.message(schema_index()?, b, depth + 1)?);
                }
                _ => r.skip(wire)?,
            }
        }
        Ok(match special {
            Special::Time | Special::MicroTime => {
                // Go writes the zero time as an empty message, and reads only the seconds of
                // a `Time` (its JSON form has no fraction).
                let (seconds, nanos) = (ints[1], ints[2]);
                if buf.is_empty() {
                    Value::Null
                } else if special == Special::MicroTime && !(0..1_000_000_000).contains(&nanos) {
                    return Err(invalid(format!("nanos {nanos} out of range")));
                } else {
                    let micros = (special == Special::MicroTime).then_some(nanos / 1000);
                    Value::String(
                        rfc3339(seconds, micros)
                            .ok_or_else(|| invalid(format!("timestamp {seconds} out of range")))?,
                    )
                }
            }
            Special::Duration => Value::String(go_duration(ints[1])),
            Special::IntOrString => match ints[1] {
                0 => Value::from(ints[2]),
                1 => Value::String(strings.pop().unwrap_or_default()),
                t => return Err(invalid(format!("IntOrString type {t}"))),
            },
            Special::Quantity => match strings.pop() {
                Some(s) if !s.is_empty() => Value::String(s),
                _ => Value::Null,
            },
            Special::EmbeddedJson => {
                if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(bytes)
                        .map_err(|e| invalid(format!("embedded JSON: {e}")))?
                }
            }
            Special::StringList => Value::Array(strings.into_iter().map(Value::String).collect()),
            Special::SchemaOrBool => schema.unwrap_or(Value::Bool(allows)),
            Special::SchemaOrArray => {
                if schemas.is_empty() {
                    schema.unwrap_or(Value::Null)
                } else {
                    Value::Array(schemas)
                }
            }
            Special::SchemaOrStringArray => {
                if strings.is_empty() {
                    schema.unwrap_or(Value::Null)
                } else {
                    Value::Array(strings.into_iter().map(Value::String).collect())
                }
            }
        })
    }
}

fn message_index(message: &Message, field: &Field) -> Result<usize> {
    field.message.ok_or_else(|| {
        ProtobufDecodeError::UnknownMessage(format!("{}.{}", message.name, field.json))
    })
}

/// Reads one scalar of `kind` (the wire type is already checked).
fn scalar(kind: Kind, message: &Message, field: &str, r: &mut Reader<'_>) -> Result<Value> {
    let invalid = |reason: &str| ProtobufDecodeError::InvalidValue {
        message: message.name.clone(),
        reason: format!("{field}: {reason}"),
    };
    Ok(match kind {
        Kind::String => Value::String(utf8(r.len_delimited()?, &message.name, field)?),
        Kind::Bytes => Value::String(base64(r.len_delimited()?)),
        Kind::Bool => Value::Bool(r.varint()? != 0),
        Kind::Int32 => Value::from(r.varint()? as i32),
        Kind::Int64 => Value::from(r.varint()? as i64),
        Kind::Uint32 => Value::from(r.varint()? as u32),
        Kind::Uint64 => Value::from(r.varint()?),
        Kind::Sint32 => Value::from(zigzag(r.varint()?) as i32),
        Kind::Sint64 => Value::from(zigzag(r.varint()?)),
        Kind::Double => serde_json::Number::from_f64(f64::from_bits(r.fixed64()?))
            .map(Value::Number)
            .ok_or_else(|| invalid("non-finite double"))?,
        Kind::Float => serde_json::Number::from_f64(f64::from(f32::from_bits(r.fixed32()?)))
            .map(Value::Number)
            .ok_or_else(|| invalid("non-finite float"))?,
        Kind::Message => return Err(invalid("message where a scalar was expected")),
    })
}

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Standard base64 with padding, as Go's `encoding/json` writes `[]byte`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `seconds` since the epoch as RFC 3339 in UTC, with six fractional digits when `micros` is
/// given; `None` outside the years 0 to 9999, which Go refuses to write.
fn rfc3339(seconds: i64, micros: Option<i64>) -> Option<String> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return None;
    }
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let frac = micros.map(|u| format!(".{u:06}")).unwrap_or_default();
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}{frac}Z"
    ))
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A nanosecond count as Go's `time.Duration.String` writes it ("1h0m0s", "1.5s", "300ms").
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_owned();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = if n < 1_000 {
            ("ns", 1)
        } else if n < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{sign}{}{unit}", fraction(n, div));
    }
    let total_secs = n / 1_000_000_000;
    let (h, m) = (total_secs / 3600, total_secs % 3600 / 60);
    let s = fraction(n % 60_000_000_000, 1_000_000_000);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}s")
    } else {
        format!("{sign}{s}s")
    }
}

/// `n / div` in decimal, without trailing fractional zeros.
fn fraction(n: u64, div: u64) -> String {
    let whole = n / div;
    let rest = n % div;
    if rest == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests;
