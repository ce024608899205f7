use super::*;
use serde_json::json;

/// A test-only protobuf encoder: writes exactly the fields it is given, zero values included,
/// as Go's generated marshallers do.
#[derive(Clone, Default)]
struct Enc(Vec<u8>);

impl Enc {
    fn new() -> Enc {
        Enc::default()
    }

    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.raw_varint((u64::from(field) << 3) | u64::from(wire));
    }

    fn bytes(mut self, field: u32, b: &[u8]) -> Enc {
        self.key(field, LEN);
        self.raw_varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    fn str(self, field: u32, s: &str) -> Enc {
        self.bytes(field, s.as_bytes())
    }

    /// int32, int64 and bool fields (negative values sign-extended to ten bytes).
    fn int(mut self, field: u32, v: i64) -> Enc {
        self.key(field, VARINT);
        self.raw_varint(v as u64);
        self
    }

    fn double(mut self, field: u32, v: f64) -> Enc {
        self.key(field, FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn msg(self, field: u32, m: Enc) -> Enc {
        self.bytes(field, &m.0)
    }

    /// A map<string, string> entry.
    fn entry(self, field: u32, k: &str, v: &str) -> Enc {
        self.msg(field, Enc::new().str(1, k).str(2, v))
    }

    /// A map<string, bytes> entry.
    fn entry_bytes(self, field: u32, k: &str, v: &[u8]) -> Enc {
        self.msg(field, Enc::new().str(1, k).bytes(2, v))
    }

    /// A map<string, message> entry.
    fn entry_msg(self, field: u32, k: &str, v: Enc) -> Enc {
        self.msg(field, Enc::new().str(1, k).msg(2, v))
    }
}

/// A whole request body: magic, then `runtime.Unknown` around `raw`.
fn body(api_version: &str, kind: &str, raw: Enc) -> Vec<u8> {
    let unknown = Enc::new()
        .msg(1, Enc::new().str(1, api_version).str(2, kind))
        .msg(2, raw)
        .str(3, "")
        .str(4, "");
    let mut out = K8S_PROTOBUF_MAGIC.to_vec();
    out.extend_from_slice(&unknown.0);
    out
}

fn decode(api_version: &str, kind: &str, raw: Enc) -> Value {
    match decode_k8s_protobuf(&body(api_version, kind, raw)) {
        Ok(v) => v,
        Err(e) => panic!("decode failed: {e}"),
    }
}

/// ObjectMeta as Go writes it: every non-pointer field present, creationTimestamp empty.
fn meta(name: &str) -> Enc {
    Enc::new()
        .str(1, name)
        .str(2, "")
        .str(3, "")
        .str(4, "")
        .str(5, "")
        .str(6, "")
        .int(7, 0)
        .msg(8, Enc::new())
}

fn quantity(s: &str) -> Enc {
    Enc::new().str(1, s)
}

fn int_or_string_int(v: i64) -> Enc {
    Enc::new().int(1, 0).int(2, v).str(3, "")
}

fn int_or_string_str(s: &str) -> Enc {
    Enc::new().int(1, 1).int(2, 0).str(3, s)
}

#[test]
fn tables_load_and_resolve_json_names() {
    let t = match tables() {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    };
    let json_of = |message: &str, tag: u32| {
        let i = t.by_name[message];
        t.messages[i].fields[&tag].json.clone()
    };
    assert_eq!(json_of("io.k8s.api.core.v1.PodStatus", 5), "hostIP");
    assert_eq!(json_of("io.k8s.api.core.v1.PodStatus", 12), "podIPs");
    assert_eq!(
        json_of("io.k8s.api.rbac.v1.PolicyRule", 5),
        "nonResourceURLs"
    );
    assert_eq!(json_of(JSON_SCHEMA_PROPS, 2), "$schema");
    assert_eq!(json_of(JSON_SCHEMA_PROPS, 3), "$ref");
    assert_eq!(
        json_of(JSON_SCHEMA_PROPS, 38),
        "x-kubernetes-preserve-unknown-fields"
    );
    assert_eq!(
        json_of("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", 8),
        "creationTimestamp"
    );
    assert!(t
        .by_name
        .contains_key("io.k8s.api.core.v1.AWSElasticBlockStoreVolumeSource"));
}

#[test]
fn namespace_with_labels() {
    let raw = Enc::new()
        .msg(
            1,
            meta("team-a")
                .entry(11, "team", "a")
                .entry(11, "env", "prod")
                .entry(12, "note", ""),
        )
        .msg(2, Enc::new())
        .msg(3, Enc::new().str(1, ""));
    assert_eq!(
        decode("v1", "Namespace", raw),
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "team-a",
                "labels": {"team": "a", "env": "prod"},
                "annotations": {"note": ""},
            },
            "spec": {},
            "status": {},
        })
    );
}

#[test]
fn configmap_with_data_and_binary_data() {
    let raw = Enc::new()
        .msg(1, meta("cfg"))
        .entry(2, "a", "b")
        .entry(2, "multi", "line1\nline2")
        .entry_bytes(3, "blob", &[0, 1, 0xfe, 0xff])
        .entry_bytes(3, "empty", b"");
    assert_eq!(
        decode("v1", "ConfigMap", raw),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg"},
            "data": {"a": "b", "multi": "line1\nline2"},
            "binaryData": {"blob": "AAH+/w==", "empty": ""},
        })
    );
}

#[test]
fn secret_bytes_become_base64() {
    let raw = Enc::new()
        .msg(1, meta("s"))
        .entry_bytes(2, "user", b"admin")
        .entry_bytes(2, "pw", b"p@ss")
        .str(3, "Opaque")
        .int(5, 1);
    assert_eq!(
        decode("v1", "Secret", raw),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s"},
            "data": {"user": "YWRtaW4=", "pw": "cEBzcw=="},
            "type": "Opaque",
            "immutable": true,
        })
    );
}

#[test]
fn deployment_with_containers_ports_env_resources() {
    let container = Enc::new()
        .str(1, "web")
        .str(2, "nginx:1.27")
        .str(3, "nginx")
        .str(3, "-g")
        .msg(
            6,
            Enc::new()
                .str(1, "http")
                .int(2, 0)
                .int(3, 80)
                .str(4, "TCP")
                .str(5, ""),
        )
        .msg(7, Enc::new().str(1, "MODE").str(2, "prod"))
        .msg(
            8,
            Enc::new()
                .entry_msg(1, "cpu", quantity("500m"))
                .entry_msg(1, "memory", quantity("128Mi"))
                .entry_msg(2, "cpu", quantity("250m")),
        );
    let pod_spec = Enc::new()
        .msg(2, container)
        .str(3, "")
        .int(11, 0)
        .int(21, 0);
    let spec = Enc::new()
        .int(1, 0)
        .msg(2, Enc::new().entry(1, "app", "web"))
        .msg(
            3,
            Enc::new()
                .msg(1, meta("").entry(11, "app", "web"))
                .msg(2, pod_spec),
        )
        .msg(
            4,
            Enc::new().str(1, "RollingUpdate").msg(
                2,
                Enc::new()
                    .msg(1, int_or_string_int(0))
                    .msg(2, int_or_string_str("25%")),
            ),
        )
        .int(5, 0)
        .int(7, 0);
    let status = Enc::new().int(1, 0).int(2, 0).int(3, 0);
    let raw = Enc::new().msg(1, meta("web")).msg(2, spec).msg(3, status);
    assert_eq!(
        decode("apps/v1", "Deployment", raw),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "name": "web",
                            "image": "nginx:1.27",
                            "command": ["nginx", "-g"],
                            "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                            "env": [{"name": "MODE", "value": "prod"}],
                            "resources": {
                                "limits": {"cpu": "500m", "memory": "128Mi"},
                                "requests": {"cpu": "250m"},
                            },
                        }],
                        "automountServiceAccountToken": false,
                    },
                },
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"},
                },
            },
            "status": {},
        })
    );
}

#[test]
fn service_target_ports() {
    let spec = Enc::new()
        .msg(
            1,
            Enc::new()
                .str(1, "http")
                .str(2, "TCP")
                .int(3, 80)
                .msg(4, int_or_string_int(8080))
                .int(5, 0),
        )
        .msg(
            1,
            Enc::new()
                .str(1, "named")
                .str(2, "TCP")
                .int(3, 81)
                .msg(4, int_or_string_str("web")),
        )
        .msg(
            1,
            Enc::new()
                .str(1, "unset")
                .str(2, "UDP")
                .int(3, 53)
                .msg(4, int_or_string_int(0)),
        )
        .entry(2, "app", "web")
        .str(4, "ClusterIP");
    let raw = Enc::new().msg(1, meta("web")).msg(2, spec);
    assert_eq!(
        decode("v1", "Service", raw),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {
                "ports": [
                    {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                    {"name": "named", "protocol": "TCP", "port": 81, "targetPort": "web"},
                    {"name": "unset", "protocol": "UDP", "port": 53},
                ],
                "selector": {"app": "web"},
                "type": "ClusterIP",
            },
        })
    );
}

#[test]
fn pod_with_times_and_upstream_capitalisation() {
    let metadata = Enc::new()
        .str(1, "p")
        .str(3, "default")
        .msg(8, Enc::new().int(1, 1_700_000_000).int(2, 0))
        .msg(
            17,
            Enc::new()
                .str(1, "kubectl")
                .str(2, "Update")
                .str(3, "v1")
                .msg(4, Enc::new().int(1, 86_399))
                .str(6, "FieldsV1")
                .msg(7, Enc::new().bytes(1, br#"{"f:spec":{}}"#)),
        );
    let status = Enc::new()
        .str(1, "Running")
        .str(5, "10.0.0.1")
        .msg(7, Enc::new().int(1, 951_782_400).int(2, 999_999_999))
        .msg(12, Enc::new().str(1, "10.1.0.5"))
        .msg(12, Enc::new().str(1, "fd00::5"));
    let raw = Enc::new().msg(1, metadata).msg(3, status);
    assert_eq!(
        decode("v1", "Pod", raw),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "namespace": "default",
                "creationTimestamp": "2023-11-14T22:13:20Z",
                "managedFields": [{
                    "manager": "kubectl",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "1970-01-01T23:59:59Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {}},
                }],
            },
            "status": {
                "phase": "Running",
                "hostIP": "10.0.0.1",
                "startTime": "2000-02-29T00:00:00Z",
                "podIPs": [{"ip": "10.1.0.5"}, {"ip": "fd00::5"}],
            },
        })
    );
}

#[test]
fn empty_time_is_left_out_but_the_epoch_is_not() {
    let raw = Enc::new()
        .msg(1, meta("e"))
        .msg(3, Enc::new().msg(7, Enc::new().int(1, 0).int(2, 0)));
    assert_eq!(
        decode("v1", "Pod", raw),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "e"},
            "status": {"startTime": "1970-01-01T00:00:00Z"},
        })
    );
}

#[test]
fn lease_micro_time() {
    let spec = Enc::new()
        .str(1, "node-1")
        .int(2, 40)
        .msg(4, Enc::new().int(1, 1_700_000_000).int(2, 123_456_789));
    let raw = Enc::new().msg(1, meta("l")).msg(2, spec);
    assert_eq!(
        decode("coordination.k8s.io/v1", "Lease", raw),
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l"},
            "spec": {
                "holderIdentity": "node-1",
                "leaseDurationSeconds": 40,
                "renewTime": "2023-11-14T22:13:20.123456Z",
            },
        })
    );
}

#[test]
fn repeated_ints_packed_and_unpacked() {
    // PodSecurityContext.supplementalGroups (tag 4), once packed and once not.
    let mut packed = Enc::new();
    packed.raw_varint(1000);
    packed.raw_varint(2000);
    let sc = Enc::new()
        .bytes(4, &packed.0)
        .int(4, 3000)
        .int(2, 0)
        .int(3, 0)
        .int(5, 0);
    let raw = Enc::new().msg(1, meta("p")).msg(2, Enc::new().msg(14, sc));
    let got = decode("v1", "Pod", raw);
    assert_eq!(
        got["spec"]["securityContext"],
        json!({"supplementalGroups": [1000, 2000, 3000], "runAsUser": 0, "fsGroup": 0})
    );
}

#[test]
fn negative_numbers_and_doubles() {
    let schema = Enc::new()
        .str(5, "integer")
        .double(11, 0.0)
        .double(9, 1.5)
        .int(13, -1)
        .int(38, 1)
        .msg(30, Enc::new().int(1, 1));
    let version = Enc::new()
        .str(1, "v1")
        .int(2, 1)
        .int(3, 0)
        .msg(4, Enc::new().msg(1, schema));
    let raw = Enc::new().msg(1, meta("crontabs.example.com")).msg(
        2,
        Enc::new()
            .str(1, "example.com")
            .str(4, "Namespaced")
            .msg(7, version),
    );
    let got = decode("apiextensions.k8s.io/v1", "CustomResourceDefinition", raw);
    assert_eq!(
        got["spec"]["versions"][0],
        json!({
            "name": "v1",
            "served": true,
            "schema": {"openAPIV3Schema": {
                "type": "integer",
                "minimum": 0.0,
                "maximum": 1.5,
                "maxLength": -1,
                "x-kubernetes-preserve-unknown-fields": true,
                "additionalProperties": true,
            }},
        })
    );
}

#[test]
fn crd_schema_special_forms() {
    let string_schema = || Enc::new().str(5, "string");
    let schema = Enc::new()
        .str(5, "object")
        .entry_msg(29, "name", string_schema())
        .entry_msg(
            29,
            "tags",
            Enc::new()
                .str(5, "array")
                .msg(24, Enc::new().msg(1, string_schema())),
        )
        .entry_msg(
            29,
            "pair",
            Enc::new().str(5, "array").msg(
                24,
                Enc::new().msg(2, string_schema()).msg(2, string_schema()),
            ),
        )
        .msg(30, Enc::new().int(1, 0).msg(2, string_schema()))
        .msg(8, Enc::new().bytes(1, br#"{"name":"x"}"#))
        .msg(20, Enc::new().bytes(1, b"\"a\""))
        .msg(20, Enc::new().bytes(1, b"3"))
        .entry_msg(32, "name", Enc::new().str(2, "tags"))
        .str(23, "name");
    let raw = Enc::new().msg(1, meta("c")).msg(
        2,
        Enc::new().msg(7, Enc::new().str(1, "v1").msg(4, Enc::new().msg(1, schema))),
    );
    let got = decode("apiextensions.k8s.io/v1", "CustomResourceDefinition", raw);
    assert_eq!(
        got["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "pair": {"type": "array", "items": [{"type": "string"}, {"type": "string"}]},
            },
            "additionalProperties": {"type": "string"},
            "default": {"name": "x"},
            "enum": ["a", 3],
            "dependencies": {"name": ["tags"]},
            "required": ["name"],
        })
    );
}

#[test]
fn rbac_role_and_unknown_fields_skipped() {
    let rule = Enc::new()
        .str(1, "get")
        .str(1, "list")
        .str(2, "")
        .str(3, "pods")
        .str(5, "/healthz")
        .int(99, 7)
        .str(100, "future")
        .double(101, 1.0)
        .msg(102, Enc::new().str(1, "x"));
    let raw = Enc::new().msg(1, meta("reader")).msg(2, rule);
    assert_eq!(
        decode("rbac.authorization.k8s.io/v1", "Role", raw),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "reader"},
            "rules": [{
                "verbs": ["get", "list"],
                "apiGroups": [""],
                "resources": ["pods"],
                "nonResourceURLs": ["/healthz"],
            }],
        })
    );
}

#[test]
fn delete_options_from_any_group() {
    let raw = Enc::new().int(1, 0).str(4, "Foreground").str(5, "All");
    assert_eq!(
        decode("apps/v1", "DeleteOptions", raw),
        json!({
            "apiVersion": "apps/v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "propagationPolicy": "Foreground",
            "dryRun": ["All"],
        })
    );
}

#[test]
fn errors_are_typed() {
    use ProtobufDecodeError as E;
    assert_eq!(decode_k8s_protobuf(b""), Err(E::MissingMagic));
    assert_eq!(decode_k8s_protobuf(b"{\"kind\":1}"), Err(E::MissingMagic));
    assert_eq!(decode_k8s_protobuf(b"k8s\x00"), Err(E::MissingTypeMeta));
    let unknown_kind = body("v1", "Gizmo", Enc::new());
    assert!(matches!(
        decode_k8s_protobuf(&unknown_kind),
        Err(E::UnknownKind { .. })
    ));
    let unknown_group = body("example.com/v1", "Namespace", Enc::new());
    assert!(matches!(
        decode_k8s_protobuf(&unknown_group),
        Err(E::UnknownKind { .. })
    ));
    // Truncated varint in the envelope.
    assert!(matches!(
        decode_k8s_protobuf(b"k8s\x00\x0a\x80"),
        Err(E::Truncated { .. })
    ));
    // Length running past the end.
    assert!(matches!(
        decode_k8s_protobuf(b"k8s\x00\x0a\x7f\x0a"),
        Err(E::Truncated { .. })
    ));
    // Eleven-byte varint.
    let mut long = b"k8s\x00\x28".to_vec();
    long.extend_from_slice(&[0xff; 10]);
    long.push(0);
    assert!(matches!(
        decode_k8s_protobuf(&long),
        Err(E::BadVarint { .. })
    ));
    // Field number zero and group wire types.
    assert!(matches!(
        decode_k8s_protobuf(b"k8s\x00\x02\x00"),
        Err(E::BadKey { .. })
    ));
    assert!(matches!(
        decode_k8s_protobuf(b"k8s\x00\x0b"),
        Err(E::BadKey { .. })
    ));
    // A string field that is not UTF-8.
    let bad_utf8 = body(
        "v1",
        "Namespace",
        Enc::new().msg(1, Enc::new().bytes(1, &[0xff, 0xfe])),
    );
    assert!(matches!(
        decode_k8s_protobuf(&bad_utf8),
        Err(E::InvalidUtf8 { .. })
    ));
    // A string field sent as a varint.
    let wrong = body("v1", "Namespace", Enc::new().msg(1, Enc::new().int(1, 5)));
    assert!(matches!(
        decode_k8s_protobuf(&wrong),
        Err(E::WrongWireType { .. })
    ));
    // Bad embedded JSON.
    let bad_json = body(
        "v1",
        "Pod",
        Enc::new().msg(
            1,
            Enc::new().msg(17, Enc::new().msg(7, Enc::new().bytes(1, b"{nope"))),
        ),
    );
    assert!(matches!(
        decode_k8s_protobuf(&bad_json),
        Err(E::InvalidValue { .. })
    ));
    // Bad IntOrString type, out-of-range time and non-finite doubles.
    let bad_ios = body(
        "policy/v1",
        "PodDisruptionBudget",
        Enc::new().msg(2, Enc::new().msg(1, Enc::new().int(1, 7))),
    );
    assert!(matches!(
        decode_k8s_protobuf(&bad_ios),
        Err(E::InvalidValue { .. })
    ));
    let bad_time = body(
        "v1",
        "Namespace",
        Enc::new().msg(1, Enc::new().msg(8, Enc::new().int(1, i64::MAX))),
    );
    assert!(matches!(
        decode_k8s_protobuf(&bad_time),
        Err(E::InvalidValue { .. })
    ));
    // A compressed envelope.
    let mut gz = K8S_PROTOBUF_MAGIC.to_vec();
    gz.extend_from_slice(
        &Enc::new()
            .msg(1, Enc::new().str(1, "v1").str(2, "Namespace"))
            .str(3, "gzip")
            .0,
    );
    assert!(matches!(
        decode_k8s_protobuf(&gz),
        Err(E::UnsupportedEncoding(_))
    ));
}

#[test]
fn nesting_is_bounded() {
    // JSONSchemaProps.not (tag 28) nests without limit on the wire.
    let mut schema = Enc::new().str(5, "string");
    for _ in 0..100 {
        schema = Enc::new().msg(28, schema);
    }
    let raw = Enc::new().msg(
        2,
        Enc::new().msg(7, Enc::new().str(1, "v1").msg(4, Enc::new().msg(1, schema))),
    );
    assert_eq!(
        decode_k8s_protobuf(&body(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            raw
        )),
        Err(ProtobufDecodeError::TooDeep)
    );
    let mut shallow = Enc::new().str(5, "string");
    for _ in 0..20 {
        shallow = Enc::new().msg(28, shallow);
    }
    let raw = Enc::new().msg(
        2,
        Enc::new().msg(
            7,
            Enc::new().str(1, "v1").msg(4, Enc::new().msg(1, shallow)),
        ),
    );
    assert!(decode_k8s_protobuf(&body(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        raw
    ))
    .is_ok());
}

#[test]
fn mangled_bodies_never_panic() {
    let seed = body(
        "apps/v1",
        "Deployment",
        Enc::new().msg(1, meta("web")).msg(
            2,
            Enc::new().int(1, 3).msg(
                3,
                Enc::new().msg(
                    2,
                    Enc::new().msg(
                        2,
                        Enc::new()
                            .str(1, "c")
                            .str(2, "img")
                            .msg(8, Enc::new().entry_msg(1, "cpu", quantity("1"))),
                    ),
                ),
            ),
        ),
    );
    for cut in 0..seed.len() {
        let _ = decode_k8s_protobuf(&seed[..cut]);
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut mangled = seed.clone();
        let pos = 4 + (state as usize) % (seed.len() - 4);
        mangled[pos] = (state >> 32) as u8;
        let _ = decode_k8s_protobuf(&mangled);
    }
}

#[test]
fn go_durations() {
    let s = 1_000_000_000;
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(3600 * s), "1h0m0s");
    assert_eq!(go_duration(90 * s), "1m30s");
    assert_eq!(go_duration(5 * s), "5s");
    assert_eq!(go_duration(s + s / 2), "1.5s");
    assert_eq!(go_duration(300_000_000), "300ms");
    assert_eq!(go_duration(1_500), "1.5µs");
    assert_eq!(go_duration(7), "7ns");
    assert_eq!(go_duration(-(2 * 3600 + 5) * s), "-2h0m5s");
}

#[test]
fn rfc3339_edges() {
    assert_eq!(rfc3339(0, None).as_deref(), Some("1970-01-01T00:00:00Z"));
    assert_eq!(rfc3339(-1, None).as_deref(), Some("1969-12-31T23:59:59Z"));
    assert_eq!(
        rfc3339(253_402_300_799, Some(5)).as_deref(),
        Some("9999-12-31T23:59:59.000005Z")
    );
    assert_eq!(rfc3339(253_402_300_800, None), None);
    assert_eq!(rfc3339(-62_167_219_201, None), None);
}

#[test]
fn base64_padding() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
}

#[test]
fn inlined_structs_are_flattened() {
    let volume = Enc::new().str(1, "cfg").msg(
        2,
        Enc::new().msg(
            19,
            Enc::new()
                .msg(1, Enc::new().str(1, "app-config"))
                .int(3, 0o644),
        ),
    );
    let env = Enc::new().str(1, "PW").str(2, "").msg(
        3,
        Enc::new().msg(
            4,
            Enc::new()
                .msg(1, Enc::new().str(1, "creds"))
                .str(2, "password")
                .int(3, 0),
        ),
    );
    let probe = Enc::new()
        .msg(
            1,
            Enc::new().msg(
                2,
                Enc::new()
                    .str(1, "/healthz")
                    .msg(2, int_or_string_str("http"))
                    .str(3, "")
                    .str(4, "HTTP"),
            ),
        )
        .int(2, 5)
        .int(3, 1);
    let container = Enc::new()
        .str(1, "app")
        .str(2, "app:1")
        .msg(7, env)
        .msg(10, probe);
    let raw = Enc::new()
        .msg(1, meta("p"))
        .msg(2, Enc::new().msg(1, volume).msg(2, container));
    assert_eq!(
        decode("v1", "Pod", raw)["spec"],
        json!({
            "volumes": [{"name": "cfg", "configMap": {"name": "app-config", "defaultMode": 420}}],
            "containers": [{
                "name": "app",
                "image": "app:1",
                "env": [{
                    "name": "PW",
                    "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}},
                }],
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                    "initialDelaySeconds": 5,
                    "timeoutSeconds": 1,
                },
            }],
        })
    );
}

#[test]
fn every_built_in_kind_decodes_from_protobuf() {
    // kubectl and client-go send protobuf bodies for built-in kinds: each needs its package.
    let tables = tables().expect("tables");
    let missing: Vec<String> = crate::kinds::builtin_kinds()
        .iter()
        .map(|k| {
            let api_version = if k.group.is_empty() {
                k.version.to_string()
            } else {
                format!("{}/{}", k.group, k.version)
            };
            (api_version, k.kind)
        })
        .filter(|(v, kind)| tables.message_for(v, kind).is_none())
        .map(|(v, kind)| format!("{v} {kind}"))
        .collect();
    assert!(missing.is_empty(), "no protobuf message for {missing:?}");
}
