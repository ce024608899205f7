//! Measures what managedFields bookkeeping costs per create of a realistic pod.
use fabrik_apiserver::resources::Catalog;
use serde_json::json;

fn main() {
    let catalog = Catalog::builtin();
    let def = catalog.get("", "v1", "pods").expect("pods");
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "labels": {"app": "x", "tier": "y"}, "annotations": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "nginx", "command": ["sh"], "args": ["-c", "sleep 1"], "ports": [{"containerPort": 80}, {"containerPort": 443}],
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}, {"name": "D", "value": "4"}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
        "volumeMounts": [{"name": "v", "mountPath": "/v"}, {"name": "w", "mountPath": "/w"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 80}}}],
        "volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "configMap": {"name": "cm"}}],
        "nodeSelector": {"gpu": "h200"}, "tolerations": [{"key": "k", "operator": "Exists"}]}});
    def.strategy.prepare_for_create(&mut pod);
    let n = 2000;
    let start = std::time::Instant::now();
    for _ in 0..n {
        let _ = fabrik_apiserver::registry::track_for_bench(&def, &pod);
    }
    println!("managedFields per create: {:?}", start.elapsed() / n);
    let start = std::time::Instant::now();
    for _ in 0..n {
        let mut p = pod.clone();
        let _ = def.schemas.get().prune_unknown(&def.definition, &mut p);
    }
    println!("prune per create: {:?}", start.elapsed() / n);
    let start = std::time::Instant::now();
    for _ in 0..n {
        let _ = (def.type_check.expect("typed"))(&pod);
    }
    println!("type check per create: {:?}", start.elapsed() / n);
}
