//! Hostile-tenant checks of what the syncer copies to the host (issue isolation-2, items 1, 3,
//! 4 and 8): Endpoints / EndpointSlices naming addresses that are not the tenant's own pods,
//! `ExternalName` targets, `externalIPs` and other host addresses a Service could claim,
//! `subPath` / `subPathExpr` / item paths that escape their volume, and IngressClasses the
//! tenant was not given. Every row asserts on the **host** object (read with the host
//! kubeconfig) that the hostile value is absent, not only that the tenant request failed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use e2e::{kc, kc_ok};
use e2e::{kubectls, Fabrik, Kubectl};
use fabrik_api::naming::host_name;
use serde_json::Value;

const TENANT: &str = "iso";
const HOST_NS: &str = "fabrik-iso";

fn poll(what: &str, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if check()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `kubectl apply` of a YAML document: Ok(stdout) or Err(stderr).
fn apply(k: &Kubectl, kubeconfig: &Path, dir: &Path, yaml: &str) -> Result<Result<String, String>> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("apply-{n}.yaml"));
    std::fs::write(&file, yaml)?;
    let out = kc(k, kubeconfig, &["apply", "-f", &file.display().to_string()])?;
    Ok(if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// Plays the host's kubelet: merges `status` (JSON) into host pod `ns/name`'s status.
fn set_pod_status(k: &Kubectl, host: &Path, ns: &str, name: &str, status: &str) -> Result<()> {
    kc_ok(
        k,
        host,
        &[
            "patch",
            "pod",
            name,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ],
    )?;
    Ok(())
}

/// The host copy of tenant object `default/<name>`, or None.
fn host_get(k: &Kubectl, host: &Path, kind: &str, name: &str) -> Result<Option<Value>> {
    let hname = host_name(name, "default", TENANT);
    let out = kc(k, host, &["get", kind, &hname, "-n", HOST_NS, "-o", "json"])?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("NotFound") || err.contains("not found") {
            return Ok(None);
        }
        bail!("kubectl get {kind} {hname}: {err}");
    }
    Ok(Some(serde_json::from_slice(&out.stdout)?))
}

fn wait_host(k: &Kubectl, host: &Path, kind: &str, name: &str) -> Result<Value> {
    let mut found = None;
    poll(&format!("the host copy of {kind} {name}"), || {
        found = host_get(k, host, kind, name)?;
        Ok(found.is_some())
    })?;
    found.ok_or_else(|| anyhow::anyhow!("no host {kind} {name}"))
}

/// A ConfigMap created now reaching the host shows that the syncer has looked at everything
/// created before it.
fn caught_up(k: &Kubectl, host: &Path, tenant: &Path, dir: &Path, marker: &str) -> Result<()> {
    let yaml =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {marker}}}\ndata: {{a: b}}\n");
    if let Err(e) = apply(k, tenant, dir, &yaml)? {
        bail!("marker {marker}: {e}");
    }
    wait_host(k, host, "configmap", marker).map(|_| ())
}

fn start() -> Result<(Fabrik, Kubectl, PathBuf, PathBuf)> {
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = kubectls().pop().expect("a kubectl");
    let host = f.kubeconfig();
    let dir = f.data_dir();
    let spec = format!(
        "apiVersion: fabrik.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {TENANT}}}\nspec:\n  \
         quota: {{pods: 20, nodePorts: 2, loadBalancers: 2}}\n  \
         sync: {{extraKinds: [ingresses.networking.k8s.io]}}\n  \
         isolation:\n    ingressClasses: [tenant-web, tenant-alb]\n    \
         externalNames: [\"*.db.example.com\"]\n"
    );
    if let Err(e) = apply(&k, &host, &dir, &spec)? {
        bail!("tenant: {e}");
    }
    kc_ok(
        &k,
        &host,
        &[
            "wait",
            &format!("tenant/{TENANT}"),
            "--for=jsonpath={.status.phase}=Ready",
            "--timeout=60s",
        ],
    )?;
    let printed = f.fabrik_cli(&["tenant", "kubeconfig", TENANT])?;
    if !printed.status.success() {
        bail!(
            "fabrik tenant kubeconfig: {}",
            String::from_utf8_lossy(&printed.stderr)
        );
    }
    let cfg = dir.join("iso.kubeconfig");
    std::fs::write(&cfg, &printed.stdout)?;
    Ok((f, k, host, cfg))
}

fn selectorless(name: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{ports: [{{port: 80}}]}}\n")
}

fn endpoints(name: &str, ips: &[&str]) -> String {
    let addresses: Vec<String> = ips.iter().map(|ip| format!("{{ip: \"{ip}\"}}")).collect();
    format!(
        "apiVersion: v1\nkind: Endpoints\nmetadata: {{name: {name}}}\n\
         subsets: [{{addresses: [{}], ports: [{{port: 80}}]}}]\n",
        addresses.join(", ")
    )
}

fn slice(service: &str, family: &str, addresses: &[&str]) -> String {
    let endpoints: Vec<String> = addresses
        .iter()
        .map(|a| format!("{{addresses: [\"{a}\"]}}"))
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {service}-1, labels: {{kubernetes.io/service-name: {service}}}}}\n\
         addressType: {family}\nendpoints: [{}]\nports: [{{port: 80}}]\n",
        endpoints.join(", ")
    )
}

/// Every address a host Endpoints or EndpointSlice names.
fn host_addresses(obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for s in obj["subsets"].as_array().into_iter().flatten() {
        for list in ["addresses", "notReadyAddresses"] {
            for a in s[list].as_array().into_iter().flatten() {
                out.push(a["ip"].as_str().unwrap_or("").to_string());
            }
        }
    }
    for e in obj["endpoints"].as_array().into_iter().flatten() {
        for a in e["addresses"].as_array().into_iter().flatten() {
            out.push(a.as_str().unwrap_or("").to_string());
        }
    }
    out
}

/// The tenant's Events about `kind/name` with `reason`.
fn events(k: &Kubectl, tenant: &Path, kind: &str, name: &str, reason: &str) -> Result<Vec<Value>> {
    let out = kc_ok(k, tenant, &["get", "events", "-o", "json"])?;
    let v: Value = serde_json::from_str(&out)?;
    Ok(v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["involvedObject"]["kind"] == kind
                && e["involvedObject"]["name"] == name
                && e["reason"] == reason
        })
        .cloned()
        .collect())
}

#[test]
fn endpoints_name_only_the_tenants_own_pods_on_the_host() -> Result<()> {
    let (_f, k, host, t) = start()?;
    let dir = tempfile::tempdir()?;
    let dir = dir.path();

    // A host workload that is not the tenant's, with a pod IP (as another tenant's pod has).
    let foreign = "apiVersion: v1\nkind: Pod\nmetadata: {name: foreign, namespace: default}\n\
                   spec: {containers: [{name: c, image: busybox}]}\n";
    if let Err(e) = apply(&k, &host, dir, foreign)? {
        bail!("foreign pod: {e}");
    }
    set_pod_status(
        &k,
        &host,
        "default",
        "foreign",
        r#"{"status":{"phase":"Running","podIP":"10.244.7.7","podIPs":[{"ip":"10.244.7.7"}]}}"#,
    )?;

    // The tenant's own pod; its host pod gets an IP as a kubelet would report it.
    let web = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n\
               spec: {containers: [{name: c, image: nginx}]}\n";
    if let Err(e) = apply(&k, &t, dir, web)? {
        bail!("pod: {e}");
    }
    let host_pod = wait_host(&k, &host, "pod", "web")?;
    let host_pod_name = host_pod["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();

    // Refused at the tenant's admission: (name, object, text the error must name).
    let refused: Vec<(&str, String, &str)> = vec![
        (
            "loopback",
            endpoints("loopback", &["127.0.0.1"]),
            "127.0.0.1",
        ),
        (
            "metadata",
            endpoints("metadata", &["169.254.169.254"]),
            "169.254.169.254",
        ),
        (
            "unspecified",
            endpoints("unspecified", &["0.0.0.0"]),
            "0.0.0.0",
        ),
        ("v6-local", endpoints("v6-local", &["fe80::1"]), "fe80::1"),
        (
            "mapped",
            endpoints("mapped", &["::ffff:127.0.0.1"]),
            "::ffff:127.0.0.1",
        ),
        (
            "by-name",
            endpoints("by-name", &["metadata.google.internal"]),
            "metadata.google.internal",
        ),
        (
            "slice-loopback",
            slice("slice-loopback", "IPv4", &["127.0.0.1"]),
            "127.0.0.1",
        ),
        (
            "slice-metadata",
            slice("slice-metadata", "IPv4", &["169.254.169.254"]),
            "169.254.169.254",
        ),
        (
            "slice-fqdn",
            slice("slice-fqdn", "FQDN", &["metadata.google.internal"]),
            "FQDN",
        ),
    ];
    for (name, obj, named) in &refused {
        // The slices' Service is named as the row.
        if let Err(e) = apply(&k, &t, dir, &selectorless(name))? {
            bail!("service {name}: {e}");
        }
        match apply(&k, &t, dir, obj)? {
            Ok(out) => panic!("{name}: admitted: {out}"),
            Err(e) => assert!(
                e.contains(named) && e.contains("forbidden"),
                "{name}: the refusal does not name {named}: {e}"
            ),
        }
    }

    // Admitted in the tenant (they could be pods there), left out on the host: the host's
    // `kubernetes` Service IP, another workload's pod, an address no pod has; the tenant's own
    // pod is kept once its host pod has the address.
    let hostile = ["10.96.0.1", "10.244.7.7", "10.244.9.9"];
    let mut mixed: Vec<&str> = hostile.to_vec();
    mixed.push("10.244.3.3");
    for (kind, name, obj) in [
        ("endpoints", "mixed", endpoints("mixed", &mixed)),
        ("endpointslice", "mixed-1", slice("mixed", "IPv4", &mixed)),
    ] {
        if name == "mixed" {
            if let Err(e) = apply(&k, &t, dir, &selectorless("mixed"))? {
                bail!("service mixed: {e}");
            }
        }
        if let Err(e) = apply(&k, &t, dir, &obj)? {
            bail!("{kind} {name}: {e}");
        }
    }
    // Before the pod has the address, nothing of it is on the host.
    let before = wait_host(&k, &host, "endpoints", "mixed")?;
    assert!(host_addresses(&before).is_empty(), "{before}");

    set_pod_status(
        &k,
        &host,
        HOST_NS,
        &host_pod_name,
        r#"{"status":{"phase":"Running","podIP":"10.244.3.3","podIPs":[{"ip":"10.244.3.3"}]}}"#,
    )?;
    for (kind, name) in [("endpoints", "mixed"), ("endpointslice", "mixed-1")] {
        let mut seen = Value::Null;
        poll(&format!("the pod's address in the host {kind}"), || {
            seen = host_get(&k, &host, kind, name)?.unwrap_or(Value::Null);
            Ok(host_addresses(&seen) == vec!["10.244.3.3".to_string()])
        })?;
        let text = seen.to_string();
        for bad in hostile {
            assert!(
                !text.contains(bad),
                "{kind}: {bad} reached the host: {seen}"
            );
        }
        assert!(
            text.contains(&host_pod_name),
            "{kind}: no targetRef to the host pod: {seen}"
        );
        // Reported in the tenant, naming the addresses left out.
        let tenant_kind = if kind == "endpoints" {
            "Endpoints"
        } else {
            "EndpointSlice"
        };
        let mut found = Vec::new();
        poll(&format!("the AddressRefused event of {kind}"), || {
            found = events(&k, &t, tenant_kind, name, "AddressRefused")?;
            Ok(!found.is_empty())
        })?;
        let message = found[0]["message"].as_str().unwrap_or("");
        for bad in hostile {
            assert!(
                message.contains(bad),
                "{kind}: the event does not name {bad}: {message}"
            );
        }
    }

    // The pod finishing takes its address off the host (the IP may go to another pod).
    set_pod_status(
        &k,
        &host,
        HOST_NS,
        &host_pod_name,
        r#"{"status":{"phase":"Succeeded"}}"#,
    )?;
    poll(
        "the finished pod's address gone from the host Endpoints",
        || {
            let seen = host_get(&k, &host, "endpoints", "mixed")?.unwrap_or(Value::Null);
            Ok(host_addresses(&seen).is_empty())
        },
    )?;

    caught_up(&k, &host, &t, dir, "marker-endpoints")?;
    for (name, _, _) in &refused {
        for kind in ["endpoints", "endpointslice"] {
            let n = if kind == "endpointslice" {
                format!("{name}-1")
            } else {
                name.to_string()
            };
            if let Some(h) = host_get(&k, &host, kind, &n)? {
                assert!(host_addresses(&h).is_empty(), "{kind} {n} on the host: {h}");
            }
        }
    }
    Ok(())
}

#[test]
fn services_claim_nothing_of_the_host() -> Result<()> {
    let (_f, k, host, t) = start()?;
    let dir = tempfile::tempdir()?;
    let dir = dir.path();
    // Values the tenant asks for are taken on the host: copying them would fail or collide.
    let taken = "apiVersion: v1\nkind: Service\nmetadata: {name: taken, namespace: default}\n\
                 spec: {type: NodePort, clusterIP: 10.96.77.77, ports: [{port: 80, nodePort: 30999}]}\n";
    if let Err(e) = apply(&k, &host, dir, taken)? {
        bail!("host service: {e}");
    }

    // (name, Service, refusal text or None when admitted)
    let rows: Vec<(&str, &str, Option<&str>)> = vec![
        ("ext-ip", "spec: {ports: [{port: 80}], externalIPs: [10.0.0.1]}", Some("spec.externalIPs")),
        ("ext-metadata", "spec: {type: ExternalName, externalName: metadata.google.internal}", Some("spec.externalName")),
        ("ext-api", "spec: {type: ExternalName, externalName: kubernetes.default.svc.cluster.local}", Some("spec.externalName")),
        ("ext-ip-name", "spec: {type: ExternalName, externalName: 169.254.169.254}", Some("spec.externalName")),
        ("ext-ok", "spec: {type: ExternalName, externalName: main.db.example.com}", None),
        ("node-port", "spec: {type: NodePort, ports: [{port: 80, nodePort: 30999}]}", None),
        // A tenant Service's address is its host copy's: the tenant chooses none (not one
        // taken on the host, not a free one).
        ("taken-ip", "spec: {clusterIP: 10.96.77.77, ports: [{port: 80}]}", Some("spec.clusterIP")),
        ("free-ip", "spec: {clusterIP: 10.96.77.78, ports: [{port: 80}]}", Some("spec.clusterIP")),
        ("lb", "spec: {type: LoadBalancer, loadBalancerIP: 203.0.113.7, loadBalancerSourceRanges: [0.0.0.0/0], \
                externalTrafficPolicy: Local, healthCheckNodePort: 30998, loadBalancerClass: evil.example/lb, \
                ports: [{port: 443}]}", None),
    ];
    for (name, spec, refusal) in &rows {
        // Load-balancer controllers take addresses from annotations too.
        let annotations = if *name == "lb" {
            ", annotations: {metallb.universe.tf/loadBalancerIPs: 203.0.113.8, \
             metallb.universe.tf/allow-shared-ip: victim, lbipam.cilium.io/ips: 203.0.113.9}"
        } else {
            ""
        };
        let yaml = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}{annotations}}}\n{spec}\n"
        );
        match (apply(&k, &t, dir, &yaml)?, refusal) {
            (Ok(_), None) => {}
            (Err(e), Some(field)) => assert!(
                e.contains(field) && e.contains("forbidden"),
                "{name}: the refusal does not name {field}: {e}"
            ),
            (Ok(out), Some(_)) => panic!("{name}: admitted: {out}"),
            (Err(e), None) => panic!("{name}: refused: {e}"),
        }
    }
    caught_up(&k, &host, &t, dir, "marker-services")?;
    for (name, _, refusal) in &rows {
        let h = host_get(&k, &host, "service", name)?;
        if refusal.is_some() {
            assert!(h.is_none(), "{name} reached the host: {h:?}");
            continue;
        }
        let h = wait_host(&k, &host, "service", name)?;
        let spec = &h["spec"];
        match *name {
            "ext-ok" => {
                assert_eq!(spec["type"], "ExternalName", "{h}");
                assert_eq!(spec["externalName"], "main.db.example.com", "{h}");
            }
            "node-port" => {
                assert_eq!(spec["type"], "NodePort", "{h}");
                assert_ne!(spec["ports"][0]["nodePort"], 30999, "{h}");
                let tenant_ip = kc_ok(
                    &k,
                    &t,
                    &["get", "svc", name, "-o", "jsonpath={.spec.clusterIP}"],
                )?;
                assert_eq!(
                    spec["clusterIP"],
                    tenant_ip.trim(),
                    "the tenant shows another address: {h}"
                );
            }
            _ => {
                for f in [
                    "loadBalancerIP",
                    "loadBalancerSourceRanges",
                    "healthCheckNodePort",
                    "loadBalancerClass",
                    "externalIPs",
                ] {
                    assert!(spec[f].is_null(), "{name}: {f} reached the host: {h}");
                }
                assert_ne!(spec["externalTrafficPolicy"], "Local", "{h}");
                let text = h.to_string();
                for value in [
                    "203.0.113.7",
                    "203.0.113.8",
                    "203.0.113.9",
                    "victim",
                    "0.0.0.0/0",
                ] {
                    assert!(
                        !text.contains(value),
                        "{name}: {value} reached the host: {h}"
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn volume_paths_and_ingress_classes_are_kept_to_the_tenant() -> Result<()> {
    let (_f, k, host, t) = start()?;
    let dir = tempfile::tempdir()?;
    let dir = dir.path();
    let pod = |name: &str, mount: &str, env: &str, volume: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  \
             - {{name: c, image: busybox, env: {env}, volumeMounts: [{mount}]}}\n  \
             volumes: [{volume}]\n"
        )
    };
    let empty = "{name: v, emptyDir: {}}";
    // (name, mount, env, volume, the field the refusal names)
    let rows: Vec<(&str, &str, &str, &str, &str)> = vec![
        ("up", "{name: v, mountPath: /m, subPath: ../../../../etc}", "[]", empty, "subPath"),
        ("abs", "{name: v, mountPath: /m, subPath: /var/run/secrets}", "[]", empty, "subPath"),
        ("expr-up", "{name: v, mountPath: /m, subPathExpr: \"$(UP)/$(UP)/etc\"}", "[{name: UP, value: \"..\"}]", empty, "subPathExpr"),
        ("expr-abs", "{name: v, mountPath: /m, subPathExpr: \"/$(X)\"}", "[{name: X, value: etc}]", empty, "subPathExpr"),
        ("expr-secret", "{name: v, mountPath: /m, subPathExpr: \"$(S)\"}",
            "[{name: S, valueFrom: {secretKeyRef: {name: s, key: k}}}]", empty, "subPathExpr"),
        ("item-up", "{name: v, mountPath: /m}", "[]",
            "{name: v, configMap: {name: c, items: [{key: k, path: ../../x}]}}", "items[0].path"),
        ("item-abs", "{name: v, mountPath: /m}", "[]",
            "{name: v, secret: {secretName: s, items: [{key: k, path: /etc/x}]}}", "items[0].path"),
        ("token-up", "{name: v, mountPath: /m}", "[]",
            "{name: v, projected: {sources: [{serviceAccountToken: {path: ../../token}}]}}", "serviceAccountToken.path"),
        ("downward-reserved", "{name: v, mountPath: /m}", "[]",
            "{name: v, downwardAPI: {items: [{path: ..data, fieldRef: {fieldPath: metadata.name}}]}}", "items[0].path"),
    ];
    for (name, mount, env, volume, field) in &rows {
        match apply(&k, &t, dir, &pod(name, mount, env, volume))? {
            Ok(out) => panic!("{name}: admitted: {out}"),
            Err(e) => assert!(
                e.contains(field) && e.contains("forbidden"),
                "{name}: the refusal does not name {field}: {e}"
            ),
        }
    }
    // An ordinary subPath is admitted and reaches the host as written.
    let fine = pod(
        "fine",
        "{name: v, mountPath: /m, subPathExpr: \"$(POD)/logs\"}",
        "[{name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]",
        empty,
    );
    if let Err(e) = apply(&k, &t, dir, &fine)? {
        bail!("fine: {e}");
    }
    let h = wait_host(&k, &host, "pod", "fine")?;
    assert_eq!(
        h["spec"]["containers"][0]["volumeMounts"][0]["subPathExpr"], "$(POD)/logs",
        "{h}"
    );

    // Ingresses: (name, class field, class annotation, host class or None when refused)
    type IngressRow<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);
    let ingresses: Vec<IngressRow> = vec![
        ("platform", Some("platform-internal"), None, None),
        ("legacy", None, Some("platform-internal"), None),
        (
            "mismatch",
            Some("tenant-web"),
            Some("platform-internal"),
            None,
        ),
        ("allowed", Some("tenant-alb"), None, Some("tenant-alb")),
        (
            "legacy-allowed",
            None,
            Some("tenant-alb"),
            Some("tenant-alb"),
        ),
        ("default", None, None, Some("tenant-web")),
    ];
    for (name, class, annotation, want) in &ingresses {
        let mut yaml =
            format!("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n");
        if let Some(a) = annotation {
            yaml.push_str(&format!(
                "  annotations: {{kubernetes.io/ingress.class: {a}}}\n"
            ));
        }
        yaml.push_str("spec:\n");
        if let Some(c) = class {
            yaml.push_str(&format!("  ingressClassName: {c}\n"));
        }
        yaml.push_str(&format!(
            "  rules: [{{host: {name}.iso.example, http: {{paths: [{{path: /, pathType: Prefix, \
             backend: {{service: {{name: web, port: {{number: 80}}}}}}}}]}}}}]\n"
        ));
        match (apply(&k, &t, dir, &yaml)?, want) {
            (Ok(_), Some(_)) => {}
            (Err(e), None) => assert!(
                e.contains("platform-internal") && e.contains("forbidden"),
                "{name}: the refusal does not name the class: {e}"
            ),
            (Ok(out), None) => panic!("{name}: admitted: {out}"),
            (Err(e), Some(_)) => panic!("{name}: refused: {e}"),
        }
    }
    caught_up(&k, &host, &t, dir, "marker-paths")?;
    for (name, ..) in &rows {
        assert!(
            host_get(&k, &host, "pod", name)?.is_none(),
            "pod {name} reached the host"
        );
    }
    for (name, _, _, want) in &ingresses {
        match want {
            None => assert!(
                host_get(&k, &host, "ingress", name)?.is_none(),
                "ingress {name} reached the host"
            ),
            Some(class) => {
                let h = wait_host(&k, &host, "ingress", name)?;
                assert_eq!(h["spec"]["ingressClassName"], *class, "{h}");
                assert!(!h.to_string().contains("platform-internal"), "{h}");
            }
        }
    }
    Ok(())
}
