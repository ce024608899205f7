//! Admission webhooks in tenants and in the host, with kubectl and a real HTTPS webhook
//! ([`e2e::webhook::TestWebhook`]) served through `fabrik up --local-backends`: mutation with
//! reinvocation, refusal, warnings, selectors, match conditions, failure policies, timeouts,
//! dry runs, deletes, the exemption of webhook configurations, the simulated backends of
//! simulated pods — and the address rules that keep a tenant's webhooks from reaching the
//! control plane, the host's internal networks or another tenant.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use anyhow::Result;
use e2e::webhook::{TestWebhook, COUNT_LABEL, DENIAL, MUTATED_LABEL, WARNING};
use e2e::{kc, kc_ok, kubectls, Fabrik, Kubectl};

use e2e::{kc_apply as apply, kc_apply_ok as apply_ok};

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(60), check)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A selector-less Service `namespace/name` served by the local port `port`.
fn local_service(namespace: &str, name: &str, port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {namespace}
  annotations: {{sim.fabrik.dev/local-port: "{port}"}}
spec:
  ports: [{{port: 443}}]
"#
    )
}

/// One webhook of a configuration (YAML list item, indented for `webhooks:`).
struct Hook<'a> {
    name: &'a str,
    path: &'a str,
    resources: &'a str,
    operations: &'a str,
    extra: &'a str,
}

fn hook(h: &Hook<'_>, service: &str, ca: &str) -> String {
    let (ns, svc) = service.split_once('/').unwrap_or(("default", service));
    format!(
        r#"- name: {name}
  clientConfig:
    service: {{namespace: {ns}, name: {svc}, path: {path}}}
    caBundle: {ca}
  rules:
  - {{apiGroups: [""], apiVersions: [v1], operations: [{ops}], resources: [{res}]}}
  sideEffects: None
  admissionReviewVersions: [v1]
{extra}"#,
        name = h.name,
        path = h.path,
        ops = h.operations,
        res = h.resources,
        extra = h.extra,
    )
}

fn config(kind: &str, name: &str, hooks: &str) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nwebhooks:\n{hooks}"
    )
}

fn labels_of(k: &Kubectl, cfg: &Path, what: &[&str]) -> Result<serde_json::Value> {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend(["-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&kc_ok(k, cfg, &args)?)?;
    Ok(v["metadata"]["labels"].clone())
}

#[test]
fn tenant_webhooks_mutate_refuse_warn_and_fail_as_configured() -> Result<()> {
    let hook_server = TestWebhook::start(&["hook.default.svc"])?;
    let port = hook_server.port.to_string();
    let f = Fabrik::start_with(&["--local-backends", &port])?;
    let cfg = f.create_tenant("hooks", &[])?;
    let k = &kubectls()[0];
    let ca = hook_server.ca_bundle();
    apply_ok(k, &cfg, &local_service("default", "hook", hook_server.port))?;

    // Mutation, in configuration-name order, with one reinvocation of the counting webhook
    // once the labelling webhook after it changed the pod.
    let only_marked = "  objectSelector: {matchLabels: {webhook: \"on\"}}\n";
    let count = Hook {
        name: "count.test.fabrik.dev",
        path: "/count",
        resources: "pods",
        operations: "CREATE",
        extra: &format!("{only_marked}  reinvocationPolicy: IfNeeded\n"),
    };
    let label = Hook {
        name: "label.test.fabrik.dev",
        path: "/label",
        resources: "pods",
        operations: "CREATE",
        extra: only_marked,
    };
    let mutating = format!(
        "{}---\n{}",
        config(
            "MutatingWebhookConfiguration",
            "a-count",
            &hook(&count, "hook", &ca)
        ),
        config(
            "MutatingWebhookConfiguration",
            "b-label",
            &hook(&label, "hook", &ca)
        )
    );
    apply_ok(k, &cfg, &mutating)?;
    kc_ok(
        k,
        &cfg,
        &["run", "marked", "--image=busybox", "--labels=webhook=on"],
    )?;
    let labels = labels_of(k, &cfg, &["pod", "marked"])?;
    assert_eq!(labels[MUTATED_LABEL], "true", "{labels}");
    assert_eq!(labels[COUNT_LABEL], "2", "reinvoked once: {labels}");
    let reviews = hook_server.received_at("/count");
    assert_eq!(reviews.len(), 2, "{reviews:?}");
    let first = &reviews[0].review;
    assert_eq!(first["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(first["request"]["operation"], "CREATE");
    assert_eq!(first["request"]["namespace"], "default");
    assert_eq!(first["request"]["resource"]["resource"], "pods");
    assert_eq!(
        first["request"]["userInfo"]["groups"][0], "system:masters",
        "{first}"
    );
    // The second call saw the first's patch and the labelling webhook's.
    assert_eq!(
        reviews[1].review["request"]["object"]["metadata"]["labels"][MUTATED_LABEL],
        "true"
    );
    // An unmarked pod is not sent.
    kc_ok(k, &cfg, &["run", "plain", "--image=busybox"])?;
    let labels = labels_of(k, &cfg, &["pod", "plain"])?;
    assert!(labels[MUTATED_LABEL].is_null(), "{labels}");
    assert!(hook_server.received().iter().all(|r| r.name() != "plain"));

    // Validation: a refusal with the webhook's code and message; match conditions (CEL);
    // a namespace selector; warnings passed to kubectl; deletes.
    let deny = Hook {
        name: "deny.test.fabrik.dev",
        path: "/deny",
        resources: "configmaps",
        operations: "CREATE",
        extra: "  objectSelector: {matchLabels: {deny: \"yes\"}}\n",
    };
    let cel = Hook {
        name: "cel.test.fabrik.dev",
        path: "/deny",
        resources: "configmaps",
        operations: "CREATE",
        extra: "  matchConditions:\n  - {name: named-cel, expression: \"object.metadata.name.startsWith('cel-')\"}\n",
    };
    let warn = Hook {
        name: "warn.test.fabrik.dev",
        path: "/warn",
        resources: "configmaps",
        operations: "CREATE",
        extra: "  namespaceSelector: {matchLabels: {warned: \"yes\"}}\n",
    };
    let protect = Hook {
        name: "protect.test.fabrik.dev",
        path: "/deny",
        resources: "configmaps",
        operations: "DELETE",
        extra: "  objectSelector: {matchLabels: {protect: \"yes\"}}\n",
    };
    let hooks = [&deny, &cel, &warn, &protect]
        .iter()
        .map(|h| hook(h, "hook", &ca))
        .collect::<String>();
    apply_ok(
        k,
        &cfg,
        &config("ValidatingWebhookConfiguration", "checks", &hooks),
    )?;
    let out = apply(
        k,
        &cfg,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: denied, labels: {deny: \"yes\"}}\n",
    )?;
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("admission webhook \"deny.test.fabrik.dev\" denied the request")
            && err.contains(DENIAL),
        "{err}"
    );
    assert!(err.contains("Forbidden"), "the webhook's reason: {err}");
    let out = kc(k, &cfg, &["create", "configmap", "cel-x"])?;
    assert!(
        stderr(&out).contains("cel.test.fabrik.dev"),
        "{}",
        stderr(&out)
    );
    kc_ok(k, &cfg, &["create", "configmap", "not-cel"])?;
    kc_ok(k, &cfg, &["create", "namespace", "loud"])?;
    kc_ok(k, &cfg, &["label", "namespace", "loud", "warned=yes"])?;
    let out = kc(k, &cfg, &["create", "configmap", "heard", "-n", "loud"])?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(WARNING), "{}", stderr(&out));
    apply_ok(
        k,
        &cfg,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, labels: {protect: \"yes\"}}\n",
    )?;
    let out = kc(k, &cfg, &["delete", "configmap", "kept"])?;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("protect.test.fabrik.dev"),
        "{}",
        stderr(&out)
    );
    kc_ok(k, &cfg, &["get", "configmap", "kept"])?;
    let deletes: Vec<_> = hook_server
        .received()
        .into_iter()
        .filter(|r| r.operation() == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert!(deletes[0].review["request"]["object"].is_null());
    assert_eq!(
        deletes[0].review["request"]["oldObject"]["metadata"]["name"],
        "kept"
    );
    // A server-side dry run is sent with dryRun (the webhooks have no side effects).
    let out = kc(
        k,
        &cfg,
        &["create", "configmap", "cel-dry", "--dry-run=server"],
    )?;
    assert!(!out.status.success(), "a dry run bypassed the webhook");
    assert!(
        stderr(&out).contains("cel.test.fabrik.dev"),
        "{}",
        stderr(&out)
    );
    assert!(hook_server
        .received()
        .iter()
        .any(|r| r.name() == "cel-dry" && r.review["request"]["dryRun"] == true));

    // Failure policies: a webhook that cannot be called fails the request under Fail, and is
    // skipped under Ignore; a webhook slower than its timeout fails it.
    let missing_fail = Hook {
        name: "missing-fail.test.fabrik.dev",
        path: "/allow",
        resources: "serviceaccounts",
        operations: "CREATE",
        extra: "  failurePolicy: Fail\n",
    };
    let missing_ignore = Hook {
        name: "missing-ignore.test.fabrik.dev",
        path: "/allow",
        resources: "secrets",
        operations: "CREATE",
        extra: "  failurePolicy: Ignore\n",
    };
    let slow = Hook {
        name: "slow.test.fabrik.dev",
        path: "/slow",
        resources: "podtemplates",
        operations: "CREATE",
        extra: "  timeoutSeconds: 1\n",
    };
    let hooks = format!(
        "{}{}{}",
        hook(&missing_fail, "missing", &ca),
        hook(&missing_ignore, "missing", &ca),
        hook(&slow, "hook", &ca)
    );
    apply_ok(
        k,
        &cfg,
        &config("ValidatingWebhookConfiguration", "failing", &hooks),
    )?;
    let out = kc(k, &cfg, &["create", "serviceaccount", "refused"])?;
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("failed calling webhook \"missing-fail.test.fabrik.dev\"")
            && err.contains("service \"missing\" not found"),
        "{err}"
    );
    kc_ok(
        k,
        &cfg,
        &[
            "create",
            "secret",
            "generic",
            "skipped",
            "--from-literal=a=b",
        ],
    )?;
    // The webhook answers after 10 s, well after its 1 s timeout.
    let out = apply(
        k,
        &cfg,
        "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: slow}\ntemplate:\n  spec:\n    containers: [{name: c, image: busybox}]\n",
    )?;
    assert!(!out.status.success(), "the timeout was not kept");
    let err = stderr(&out);
    assert!(
        err.contains("slow.test.fabrik.dev") && err.contains("deadline"),
        "{err}"
    );

    // A mutating webhook may not move the object to another namespace.
    let mover = Hook {
        name: "move.test.fabrik.dev",
        path: "/move",
        resources: "podtemplates",
        operations: "CREATE",
        extra: "",
    };
    apply_ok(
        k,
        &cfg,
        &config(
            "MutatingWebhookConfiguration",
            "mover",
            &hook(&mover, "hook", &ca),
        ),
    )?;
    let out = apply(
        k,
        &cfg,
        "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: moved}\ntemplate:\n  spec:\n    containers: [{name: c, image: busybox}]\n",
    )?;
    assert!(!out.status.success(), "the object was moved");
    assert!(
        stderr(&out).contains("changes metadata.namespace"),
        "{}",
        stderr(&out)
    );
    kc_ok(
        k,
        &cfg,
        &["delete", "mutatingwebhookconfiguration", "mover"],
    )?;

    // Connections to pods are admitted too (CONNECT, with the options as the object).
    let no_exec = Hook {
        name: "no-exec.test.fabrik.dev",
        path: "/deny",
        resources: "pods/exec",
        operations: "CONNECT",
        extra: "",
    };
    apply_ok(
        k,
        &cfg,
        &config(
            "ValidatingWebhookConfiguration",
            "no-exec",
            &hook(&no_exec, "hook", &ca),
        ),
    )?;
    let out = kc(k, &cfg, &["exec", "marked", "--", "ls", "/"])?;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no-exec.test.fabrik.dev"),
        "{}",
        stderr(&out)
    );
    let connect = hook_server
        .received()
        .into_iter()
        .find(|r| r.operation() == "CONNECT")
        .expect("a CONNECT review");
    let request = &connect.review["request"];
    assert_eq!(request["subResource"], "exec");
    assert_eq!(request["name"], "marked");
    assert_eq!(request["object"]["kind"], "PodExecOptions");
    assert_eq!(request["object"]["command"], serde_json::json!(["ls", "/"]));
    kc_ok(
        k,
        &cfg,
        &["delete", "validatingwebhookconfiguration", "no-exec"],
    )?;

    // Webhook configurations are never sent to webhooks: a webhook refusing everything can
    // always be removed.
    let everything = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: deny-all}\nwebhooks:\n- name: deny-all.test.fabrik.dev\n  clientConfig:\n    service: {namespace: default, name: hook, path: /deny}\n    caBundle: CA\n  rules:\n  - {apiGroups: [\"*\"], apiVersions: [\"*\"], operations: [\"*\"], resources: [\"*/*\"]}\n  sideEffects: None\n  admissionReviewVersions: [v1]\n".replace("CA", &ca);
    apply_ok(k, &cfg, &everything)?;
    let out = kc(k, &cfg, &["create", "configmap", "anything"])?;
    assert!(
        stderr(&out).contains("deny-all.test.fabrik.dev"),
        "{}",
        stderr(&out)
    );
    kc_ok(
        k,
        &cfg,
        &["delete", "validatingwebhookconfiguration", "deny-all"],
    )?;
    kc_ok(k, &cfg, &["create", "configmap", "anything"])?;
    Ok(())
}

#[test]
fn a_tenant_webhook_reaches_only_its_own_services_and_allowed_targets() -> Result<()> {
    let hook_server = TestWebhook::start(&["hook.default.svc", "localhost"])?;
    let port = hook_server.port;
    let f = Fabrik::start_with(&["--local-backends", &port.to_string()])?;
    let k = &kubectls()[0];
    let a = f.create_tenant("owner", &[])?;
    apply_ok(k, &a, &local_service("default", "hook", port))?;
    // Tenant "b" may name `localhost` in its URLs (its spec says so) but nothing else.
    apply_ok(
        k,
        &f.kubeconfig(),
        "apiVersion: fabrik.dev/v1alpha1\nkind: Tenant\nmetadata: {name: other}\nspec:\n  isolation:\n    webhookTargets: [localhost]\n",
    )?;
    let b = f.data_dir().join("tenants").join("other.kubeconfig");
    poll("tenant other", || {
        Ok(b.exists()
            && kc(k, &b, &["get", "namespace", "default"])?
                .status
                .success())
    })?;
    let ca = hook_server.ca_bundle();
    let url_config = |url: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: by-url}}\nwebhooks:\n- name: url.test.fabrik.dev\n  clientConfig: {{url: \"{url}\", caBundle: {ca}}}\n  rules:\n  - {{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}\n  sideEffects: None\n  admissionReviewVersions: [v1]\n"
        )
    };
    let listen = std::fs::read_to_string(f.kubeconfig())?;
    let api_server = listen
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap_or("https://127.0.0.1:6443")
        .to_string();
    for url in [
        format!("https://127.0.0.1:{port}/allow"),
        "https://169.254.169.254/latest/meta-data".to_string(),
        "https://10.96.0.1/allow".to_string(),
        "https://[::1]:443/allow".to_string(),
        format!("{api_server}/api"),
        "https://metadata.example.com/allow".to_string(),
    ] {
        let out = apply(k, &b, &url_config(&url))?;
        assert!(!out.status.success(), "{url} was admitted");
        assert!(
            stderr(&out).contains("webhooks[0].clientConfig.url"),
            "{url}: {}",
            stderr(&out)
        );
    }
    // An allowed name is checked again after resolution: `localhost` answers 127.0.0.1, which
    // a tenant never calls.
    apply_ok(
        k,
        &b,
        &url_config(&format!("https://localhost:{port}/allow")),
    )?;
    let out = kc(k, &b, &["create", "configmap", "via-localhost"])?;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no allowed address"),
        "{}",
        stderr(&out)
    );
    kc_ok(
        k,
        &b,
        &["delete", "validatingwebhookconfiguration", "by-url"],
    )?;
    // A `service` reference names the tenant's own Services: "default/hook" exists only in
    // tenant "owner".
    let h = Hook {
        name: "theirs.test.fabrik.dev",
        path: "/allow",
        resources: "configmaps",
        operations: "CREATE",
        extra: "",
    };
    apply_ok(
        k,
        &b,
        &config(
            "ValidatingWebhookConfiguration",
            "theirs",
            &hook(&h, "hook", &ca),
        ),
    )?;
    let out = kc(k, &b, &["create", "configmap", "cross"])?;
    assert!(
        stderr(&out).contains("service \"hook\" not found"),
        "{}",
        stderr(&out)
    );
    // Even under the same name, tenant "other"'s Service without a local port is its own:
    // nothing of tenant "owner" answers (no endpoints yet).
    apply_ok(
        k,
        &b,
        "apiVersion: v1\nkind: Service\nmetadata: {name: hook}\nspec:\n  selector: {app: hookd}\n  ports: [{port: 443}]\n",
    )?;
    poll("the Service on the host", || {
        let out = kc(k, &b, &["create", "configmap", "cross2"])?;
        Ok(stderr(&out).contains("no endpoints available"))
    })?;
    assert!(
        hook_server.received().is_empty(),
        "the webhook of tenant owner was called: {:?}",
        hook_server.received()
    );
    // Once pods on simulated nodes back it, the simulation answers for them.
    kc_ok(
        k,
        &b,
        &[
            "create",
            "deployment",
            "hookd",
            "--image=webhook",
            "--port=443",
        ],
    )?;
    poll("a simulated answer", || {
        Ok(kc(k, &b, &["create", "configmap", "simulated"])?
            .status
            .success())
    })?;
    assert!(hook_server.received().is_empty());
    Ok(())
}

#[test]
fn host_webhooks_see_host_requests_only() -> Result<()> {
    let hook_server = TestWebhook::start(&["hook.webhooks.svc"])?;
    let f = Fabrik::start_with(&["--local-backends", &hook_server.port.to_string()])?;
    let k = &kubectls()[0];
    let host = f.kubeconfig();
    kc_ok(k, &host, &["create", "namespace", "webhooks"])?;
    apply_ok(
        k,
        &host,
        &local_service("webhooks", "hook", hook_server.port),
    )?;
    let h = Hook {
        name: "host-deny.test.fabrik.dev",
        path: "/deny",
        resources: "configmaps",
        operations: "CREATE",
        extra: "  objectSelector: {matchLabels: {deny: \"yes\"}}\n",
    };
    apply_ok(
        k,
        &host,
        &config(
            "ValidatingWebhookConfiguration",
            "host-checks",
            &hook(&h, "webhooks/hook", &hook_server.ca_bundle()),
        ),
    )?;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: denied, namespace: default, labels: {deny: \"yes\"}}\n";
    let out = apply(k, &host, cm)?;
    assert!(stderr(&out).contains(DENIAL), "{}", stderr(&out));
    // The tenant's own request goes to the tenant's API, which has no webhooks: it succeeds.
    // What the host's webhooks see is the host's copy, written by the control plane into the
    // tenant's host namespace — a host request, under the host's policy.
    let tenant = f.create_tenant("quiet", &[])?;
    apply_ok(k, &tenant, cm)?;
    kc_ok(k, &tenant, &["get", "configmap", "denied"])?;
    poll("the host copy's review", || {
        Ok(hook_server.received().len() > 1)
    })?;
    let received = hook_server.received();
    let in_default: Vec<_> = received
        .iter()
        .filter(|r| r.review["request"]["namespace"] == "default")
        .collect();
    assert_eq!(in_default.len(), 1, "{received:?}");
    assert_eq!(
        in_default[0].review["request"]["userInfo"]["username"],
        "fabrik-admin"
    );
    for r in received
        .iter()
        .filter(|r| r.review["request"]["namespace"] != "default")
    {
        assert_eq!(r.review["request"]["namespace"], "fabrik-quiet", "{r:?}");
        assert_eq!(
            r.review["request"]["userInfo"]["username"], "system:fabrik:tenant-manager",
            "{r:?}"
        );
    }
    Ok(())
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.conv.fabrik.dev}
spec:
  group: conv.fabrik.dev
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        service: {namespace: default, name: hook, path: PATH}
        caBundle: CA
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {count: {type: integer}}}
"#;

#[test]
fn a_crd_conversion_webhook_converts_reads_writes_lists_and_watches() -> Result<()> {
    let hook_server = TestWebhook::start(&["hook.default.svc"])?;
    let f = Fabrik::start_with(&["--local-backends", &hook_server.port.to_string()])?;
    let cfg = f.create_tenant("conv", &[])?;
    let k = &kubectls()[0];
    apply_ok(k, &cfg, &local_service("default", "hook", hook_server.port))?;
    let crd = |path: &str| {
        WIDGET_CRD
            .replace("PATH", path)
            .replace("CA", &hook_server.ca_bundle())
    };
    apply_ok(k, &cfg, &crd("/convert"))?;
    poll("the CRD served", || {
        Ok(kc(k, &cfg, &["get", "widgets.v1beta1.conv.fabrik.dev"])?
            .status
            .success())
    })?;
    // A validating webhook that asks for v1 sees a v1beta1 request converted (matchPolicy
    // Equivalent, through the conversion webhook).
    let v1_only = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: v1-only}}\nwebhooks:\n- name: v1-only.test.fabrik.dev\n  clientConfig:\n    service: {{namespace: default, name: hook, path: /allow}}\n    caBundle: {}\n  rules:\n  - {{apiGroups: [conv.fabrik.dev], apiVersions: [v1], operations: [CREATE], resources: [widgets]}}\n  sideEffects: None\n  admissionReviewVersions: [v1]\n",
        hook_server.ca_bundle()
    );
    apply_ok(k, &cfg, &v1_only)?;
    // Written at v1beta1 (count), stored at v1 (size), read at either.
    apply_ok(
        k,
        &cfg,
        "apiVersion: conv.fabrik.dev/v1beta1\nkind: Widget\nmetadata: {name: w}\nspec: {count: 5}\n",
    )?;
    let get = |version: &str, path: &str| {
        kc_ok(
            k,
            &cfg,
            &[
                "get",
                &format!("widgets.{version}.conv.fabrik.dev"),
                "w",
                "-o",
                &format!("jsonpath={{.apiVersion}} {{{path}}}"),
            ],
        )
    };
    assert_eq!(get("v1", ".spec.size")?, "conv.fabrik.dev/v1 5");
    assert_eq!(get("v1beta1", ".spec.count")?, "conv.fabrik.dev/v1beta1 5");
    let seen = hook_server.received_at("/allow");
    let seen = &seen.first().expect("the v1 webhook was called").review["request"];
    assert_eq!(seen["kind"]["version"], "v1");
    assert_eq!(seen["requestKind"]["version"], "v1beta1");
    assert_eq!(seen["object"]["apiVersion"], "conv.fabrik.dev/v1");
    assert_eq!(seen["object"]["spec"]["size"], 5);
    assert!(kc_ok(
        k,
        &cfg,
        &[
            "get",
            "widgets.v1.conv.fabrik.dev",
            "w",
            "-o",
            "jsonpath={.spec.count}"
        ]
    )?
    .is_empty());
    // What the converter added outside the schemas is pruned, stored or served.
    for version in ["v1", "v1beta1"] {
        let stray = kc_ok(
            k,
            &cfg,
            &[
                "get",
                &format!("widgets.{version}.conv.fabrik.dev"),
                "w",
                "-o",
                "jsonpath={.spec.stray}",
            ],
        )?;
        assert!(stray.is_empty(), "{version}: {stray}");
    }
    // A list and a patch at v1beta1.
    let list = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "widgets.v1beta1.conv.fabrik.dev",
            "-o",
            "jsonpath={.items[*].spec.count}",
        ],
    )?;
    assert_eq!(list, "5");
    kc_ok(
        k,
        &cfg,
        &[
            "patch",
            "widgets.v1beta1.conv.fabrik.dev",
            "w",
            "--type=merge",
            "-p",
            r#"{"spec":{"count":7}}"#,
        ],
    )?;
    assert_eq!(get("v1", ".spec.size")?, "conv.fabrik.dev/v1 7");
    // A watch at v1beta1 sees converted objects.
    let mut child = std::process::Command::new(&k.path)
        .args([
            "--kubeconfig",
            &cfg.display().to_string(),
            "get",
            "widgets.v1beta1.conv.fabrik.dev",
            "--watch-only",
            "-o",
            "jsonpath={.spec.count}{\"\\n\"}",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(1500));
    kc_ok(
        k,
        &cfg,
        &[
            "patch",
            "widgets.v1.conv.fabrik.dev",
            "w",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":9}}"#,
        ],
    )?;
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let out = child.wait_with_output()?;
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.lines().any(|l| l.trim() == "9"), "watch saw: {seen:?}");
    // A converter that fails: a clear error, and the stored object untouched.
    apply_ok(k, &cfg, &crd("/missing"))?;
    poll("the broken converter in use", || {
        let out = kc(k, &cfg, &["get", "widgets.v1beta1.conv.fabrik.dev", "w"])?;
        Ok(!out.status.success())
    })?;
    let out = kc(k, &cfg, &["get", "widgets.v1beta1.conv.fabrik.dev", "w"])?;
    assert!(
        stderr(&out).contains("conversion webhook for conv.fabrik.dev/v1beta1"),
        "{}",
        stderr(&out)
    );
    assert_eq!(get("v1", ".spec.size")?, "conv.fabrik.dev/v1 9");
    apply_ok(k, &cfg, &crd("/convert"))?;
    poll("the converter back", || {
        Ok(get("v1beta1", ".spec.count").ok().as_deref() == Some("conv.fabrik.dev/v1beta1 9"))
    })?;
    assert!(hook_server
        .received_at("/convert")
        .iter()
        .all(|r| r.review["kind"] == "ConversionReview"));
    Ok(())
}
