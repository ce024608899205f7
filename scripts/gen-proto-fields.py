#!/usr/bin/env python3
"""Generates control-plane/openapi/data/k8s-proto-fields.json, the protobuf schema that
fabrik-openapi's Kubernetes protobuf decoder reads.

Re-run from the repository root after bumping k8s-pb:

    python3 scripts/gen-proto-fields.py

Inputs (found in the cargo registry, override with --k8s-pb / --k8s-openapi):
  - k8s-pb 0.9.0's prost-generated sources: every message, its field tags, snake_case names,
    wire kinds and message types.
  - k8s-openapi 0.29.0's v1_35 sources (optional): the upstream spelling of definition names
    (prost writes `AwsElasticBlockStoreVolumeSource` where upstream writes
    `AWSElasticBlockStoreVolumeSource`) and of JSON property names (`host_ip` is `hostIP`).

Output: {"<upstream message name>": {"<tag>": [snake_name, kind, type, label, map, json]}} where
  kind  is the prost scalar kind (string, bool, int32, int64, double, bytes, ...) or "message",
  type  is the full upstream name of the message type (null for scalars),
  label is "optional", "repeated" or "map",
  map   is null, or for maps [key_kind, value_kind, value_type_or_null],
  json  is the JSON property name as k8s-openapi spells it, or lowerCamelCase where it has none
        (fields Go inlines, like `Volume.volumeSource`, have none).
The decoder prefers the property names of fabrik-openapi's own definitions at run time.
"""

import argparse
import glob
import json
import os
import re
import sys

# k8s-pb module directories (relative to its src/) and the upstream name prefix of each.
PACKAGES = {
    "api/core/v1": "io.k8s.api.core.v1",
    "api/apps/v1": "io.k8s.api.apps.v1",
    "api/batch/v1": "io.k8s.api.batch.v1",
    "api/rbac/v1": "io.k8s.api.rbac.v1",
    "api/coordination/v1": "io.k8s.api.coordination.v1",
    "api/discovery/v1": "io.k8s.api.discovery.v1",
    "api/events/v1": "io.k8s.api.events.v1",
    "api/networking/v1": "io.k8s.api.networking.v1",
    "api/policy/v1": "io.k8s.api.policy.v1",
    "api/scheduling/v1": "io.k8s.api.scheduling.v1",
    "api/storage/v1": "io.k8s.api.storage.v1",
    "api/node/v1": "io.k8s.api.node.v1",
    "api/resource/v1": "io.k8s.api.resource.v1",
    "api/autoscaling/v1": "io.k8s.api.autoscaling.v1",
    "api/autoscaling/v2": "io.k8s.api.autoscaling.v2",
    "api/admissionregistration/v1": "io.k8s.api.admissionregistration.v1",
    "kube_aggregator/pkg/apis/apiregistration/v1":
        "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1",
    "api/authentication/v1": "io.k8s.api.authentication.v1",
    "api/authorization/v1": "io.k8s.api.authorization.v1",
    "apimachinery/pkg/apis/meta/v1": "io.k8s.apimachinery.pkg.apis.meta.v1",
    "apimachinery/pkg/runtime": "io.k8s.apimachinery.pkg.runtime",
    "apimachinery/pkg/util/intstr": "io.k8s.apimachinery.pkg.util.intstr",
    "apimachinery/pkg/api/resource": "io.k8s.apimachinery.pkg.api.resource",
    "apiextensions_apiserver/pkg/apis/apiextensions/v1":
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1",
}

STRUCT_RE = re.compile(r"^pub struct (\w+) \{")
ATTR_RE = re.compile(r"#\[prost\(([^\]]*)\)\]")
FIELD_RE = re.compile(r"pub (?:r#)?(\w+):\s*(.+?),?$")
SCHEMA_NAME_RE = re.compile(r'"(io\.k8s\.[A-Za-z0-9.-]+)"\.into\(\)')
JSON_KEY_RE = re.compile(r'"([^"]+)" => Field::Key_\w+,')


def normalize(name):
    """Lower case, letters and digits only: `host_ip` and `hostIP` meet here."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def lower_camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def registry_dir(crate):
    pattern = os.path.expanduser(f"~/.cargo/registry/src/*/{crate}/src")
    found = sorted(glob.glob(pattern))
    return found[-1] if found else None


def upstream_names(openapi_dir):
    """From k8s-openapi: lower-cased definition name -> upstream spelling, and upstream name ->
    {normalized property name: JSON property name}."""
    names, props = {}, {}
    if not openapi_dir or not os.path.isdir(openapi_dir):
        return names, props
    for root, _, files in os.walk(openapi_dir):
        for f in files:
            if not f.endswith(".rs"):
                continue
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                text = fh.read()
            found = SCHEMA_NAME_RE.findall(text)
            for name in found:
                names[name.lower()] = name
            if len(found) == 1:
                props[found[0]] = {normalize(k): k for k in JSON_KEY_RE.findall(text)}
    return names, props


def resolve_type(module, rust_type):
    """Turns a field's Rust type into (module path, struct name) of the message it holds."""
    t = rust_type
    for wrapper in ("::core::option::Option<", "::prost::alloc::boxed::Box<",
                    "::prost::alloc::vec::Vec<"):
        t = t.replace(wrapper, "")
    t = t.replace(" ", "").rstrip(">,")
    if "BTreeMap<" in t:
        t = t.split(",")[-1]
    parts = t.split("::")
    base = module.split("/")
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    return "/".join(base + parts[:-1]), parts[-1]


def parse_attr(attr):
    """Splits a prost attribute into (kind, label, map kinds)."""
    items = [a.strip() for a in re.split(r",(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", attr)]
    head = items[0]
    if head.startswith("btree_map") or head.startswith("hash_map") or head.startswith("map"):
        key, value = [s.strip() for s in head.split("=", 1)[1].strip().strip('"').split(",")]
        return "map", "map", (key, value)
    kind = head.split("=")[0].strip()
    label = "optional"
    for a in items[1:]:
        if a in ("optional", "repeated", "required"):
            label = a
    if label == "required":
        label = "optional"
    return kind, label, None


def parse_module(src, module):
    """All messages of one module: struct name -> [(tag, name, kind, label, map, type)]."""
    path = os.path.join(src, module, "mod.rs")
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    messages = {}
    current = None
    pending = None
    decl = ""
    for raw in lines:
        line = raw.strip()
        if current is None:
            m = STRUCT_RE.match(line)
            if m:
                messages[m.group(1)] = []
                if not line.endswith("{}"):
                    current = m.group(1)
            continue
        if line == "}":
            current = None
            continue
        m = ATTR_RE.match(line)
        if m:
            pending = m.group(1)
            continue
        if pending is not None and (line.startswith("pub ") or decl):
            decl += " " + line if decl else line
            if not decl.endswith(",") or decl.count("<") > decl.count(">"):
                continue
            line, decl = decl, ""
            fm = FIELD_RE.match(line)
            tag = re.search(r'tag = "(\d+)"', pending)
            if not fm or not tag:
                sys.exit(f"unparsed field in {module}.{current}: {line}")
            kind, label, mapkv = parse_attr(pending)
            name = fm.group(1)
            rust_type = fm.group(2)
            msg_type = None
            if kind == "message" or (mapkv and mapkv[1] == "message"):
                msg_type = resolve_type(module, rust_type)
            messages[current].append((int(tag.group(1)), name, kind, label, mapkv, msg_type))
            pending = None
    return messages


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k8s-pb", default=registry_dir("k8s-pb-0.9.0"))
    default_openapi = registry_dir("k8s-openapi-0.29.0")
    ap.add_argument("--k8s-openapi",
                    default=os.path.join(default_openapi, "v1_35") if default_openapi else None)
    ap.add_argument("--out", default="control-plane/openapi/data/k8s-proto-fields.json")
    args = ap.parse_args()
    if not args.k8s_pb or not os.path.isdir(args.k8s_pb):
        sys.exit("k8s-pb sources not found; pass --k8s-pb <dir>/src")

    canonical, properties = upstream_names(args.k8s_openapi)

    def full_name(module, struct):
        if module not in PACKAGES:
            return None
        name = f"{PACKAGES[module]}.{struct}"
        return canonical.get(name.lower(), name)

    out = {}
    missing = set()
    for module in sorted(PACKAGES):
        for struct, fields in parse_module(args.k8s_pb, module).items():
            entry = {}
            props = properties.get(full_name(module, struct), {})
            for tag, name, kind, label, mapkv, msg_type in sorted(fields):
                type_name = None
                if msg_type is not None:
                    type_name = full_name(*msg_type)
                    if type_name is None:
                        missing.add("/".join(msg_type))
                        continue
                json_name = props.get(normalize(name), lower_camel(name))
                if mapkv:
                    key_kind, value_kind = mapkv
                    map_info = [key_kind, value_kind, type_name]
                    entry[str(tag)] = [name, value_kind, type_name, "map", map_info, json_name]
                else:
                    entry[str(tag)] = [name, kind, type_name, label, None, json_name]
            out[full_name(module, struct)] = entry
    if missing:
        print("skipped fields of types outside the served groups:", sorted(missing),
              file=sys.stderr)

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write("{\n")
        names = sorted(out)
        for i, name in enumerate(names):
            body = json.dumps(out[name], separators=(",", ":"), sort_keys=False)
            fh.write(f"{json.dumps(name)}:{body}{',' if i + 1 < len(names) else ''}\n")
        fh.write("}\n")
    print(f"wrote {len(out)} messages to {args.out}")


if __name__ == "__main__":
    main()
