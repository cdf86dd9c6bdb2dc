#!/usr/bin/env python3
"""A small `kustomize build` for deploy/kubernetes, for machines without kustomize or kubectl.

    python3 deploy/kustomize.py deploy/kubernetes/overlays/production

It implements the parts of kustomize (v5) that Skua's kustomization files use, with the same
semantics, and refuses any field it does not implement, so it can never silently render
something kustomize would render differently:

- `resources`: files (multi-document YAML) and directories holding a kustomization.yaml,
  rendered recursively (so an overlay builds on the rendered base);
- `namespace`: set on every namespaced resource;
- `images`: `name` -> `newName` / `newTag` on every container and init container;
- `configMapGenerator` and `secretGenerator` with `literals` (`KEY=VALUE`): a ConfigMap, or an
  Opaque Secret with base64 `data`, whose name gets kustomize's content-hash suffix once the
  whole build is done (so an overlay's patch of a generated ConfigMap changes the hash), and
  every reference to it from a pod template (env, envFrom, volumes) is renamed to match: a
  changed setting or credential changes the pod template, and the Deployment rolls;
- `patches` with `path`: strategic-merge patches, matched to their target by kind and name.
  Maps merge recursively; a `null` value deletes the key; the lists Kubernetes merges by key
  (containers and initContainers by name, env by name, volumes by name, volumeMounts by
  mountPath, container ports by containerPort, Service ports by port, topologySpreadConstraints
  by topologyKey) merge item by item, in the order Kubernetes' strategic merge gives (the
  patch's items first, then the remaining base items); every other list is replaced.

deploy/validate.py compares this renderer's output with `kubectl kustomize` when kubectl is on
the machine, so the two cannot drift apart unnoticed.
"""

import base64
import copy
import hashlib
import json
import os
import sys

import yaml

SUPPORTED_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "images",
    "patches",
    "configMapGenerator",
    "secretGenerator",
}
GENERATOR_FIELDS = {"name", "literals"}

# Kinds that are not namespaced, among those a Skua deployment uses.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume"}

# Strategic-merge list keys: field name -> merge key (first key present in the items wins).
MERGE_KEYS = {
    "containers": ["name"],
    "initContainers": ["name"],
    "env": ["name"],
    "volumes": ["name"],
    "volumeMounts": ["mountPath"],
    "ports": ["containerPort", "port"],
    "topologySpreadConstraints": ["topologyKey"],
    "imagePullSecrets": ["name"],
}


class KustomizeError(Exception):
    """A kustomization this renderer cannot render (or kustomize would refuse)."""


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def merge_key(field, items):
    for key in MERGE_KEYS.get(field, []):
        if all(isinstance(i, dict) and key in i for i in items):
            return key
    return None


def strategic_merge(base, patch, field=None):
    """Applies a strategic-merge patch `patch` to `base` (both already copies)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = strip_directives(v)
        return out
    if isinstance(base, list) and isinstance(patch, list):
        key = merge_key(field, base + patch) if field in MERGE_KEYS else None
        if key is None:
            return strip_directives(patch)
        # As Kubernetes' strategic merge orders it: the patch's items first (merged with their
        # base item), in patch order, then the base items the patch did not name.
        named = {item[key] for item in patch}
        out = []
        for item in patch:
            old = next((b for b in base if b.get(key) == item[key]), None)
            if item.get("$patch") == "delete":
                continue
            out.append(strip_directives(item) if old is None else strategic_merge(old, item, None))
        out.extend(b for b in base if b.get(key) not in named)
        return out
    return strip_directives(patch)


def strip_directives(v):
    if isinstance(v, dict):
        return {k: strip_directives(x) for k, x in v.items() if k != "$patch" and x is not None}
    if isinstance(v, list):
        return [strip_directives(x) for x in v]
    return v


def set_images(obj, images):
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec") if obj.get("kind") != "Pod" else spec
    if obj.get("kind") == "CronJob":
        pod = spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
    if not pod:
        return
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        ref = c.get("image", "")
        name, _, tag = ref.partition(":")
        for img in images:
            if img["name"] == name:
                new_name = img.get("newName", name)
                new_tag = img.get("newTag", tag)
                c["image"] = f"{new_name}:{new_tag}" if new_tag else new_name


def build(directory):
    """Renders the kustomization in `directory` into a list of resources."""
    resources, generated = build_tree(directory)
    add_hash_suffixes(resources, generated)
    return resources


def build_tree(directory):
    """The resources of `directory` before name hashing, and the (kind, name) of those made by a
    generator (kustomize adds the hash suffixes last, at the top of the build only)."""
    kpath = os.path.join(directory, "kustomization.yaml")
    if not os.path.exists(kpath):
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    (k,) = load_docs(kpath)
    unknown = set(k) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{kpath}: fields this renderer does not implement: {sorted(unknown)}")
    if k.get("kind") != "Kustomization":
        raise KustomizeError(f"{kpath}: kind must be Kustomization")
    resources = []
    generated = set()
    for r in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, r))
        if os.path.isdir(path):
            docs, made = build_tree(path)
            generated |= made
        else:
            docs = load_docs(path)
        add_unique(kpath, resources, docs)
    made = generate(kpath, k)
    add_unique(kpath, resources, made)
    generated |= {(d["kind"], d["metadata"]["name"]) for d in made}
    for p in k.get("patches", []):
        if set(p) != {"path"}:
            raise KustomizeError(f"{kpath}: only `path` patches are implemented: {p}")
        for patch in load_docs(os.path.join(directory, p["path"])):
            matches = [i for i, r in enumerate(resources) if same_target(r, patch)]
            if len(matches) != 1:
                raise KustomizeError(f"{kpath}: patch {p['path']} matches {len(matches)} resources")
            i = matches[0]
            resources[i] = strategic_merge(copy.deepcopy(resources[i]), copy.deepcopy(patch))
    if "namespace" in k:
        for r in resources:
            if r.get("kind") not in CLUSTER_SCOPED:
                r.setdefault("metadata", {})["namespace"] = k["namespace"]
    if "images" in k:
        for r in resources:
            set_images(r, k["images"])
    return resources, generated


def add_unique(kpath, resources, docs):
    for d in docs:
        ident = identity(d)
        if any(identity(x) == ident for x in resources):
            raise KustomizeError(f"{kpath}: {ident} is defined twice")
        resources.append(d)


def generate(kpath, k):
    """The ConfigMaps and Secrets of `configMapGenerator` and `secretGenerator` (literals only)."""
    out = []
    for field, kind in (("configMapGenerator", "ConfigMap"), ("secretGenerator", "Secret")):
        for g in k.get(field, []):
            unknown = set(g) - GENERATOR_FIELDS
            if unknown or "name" not in g:
                raise KustomizeError(f"{kpath}: {field} {g.get('name')}: only name and literals are implemented")
            data = {}
            for lit in g.get("literals", []):
                key, sep, value = str(lit).partition("=")
                if not key or not sep:
                    raise KustomizeError(f"{kpath}: {field} {g['name']}: literal {lit!r} is not KEY=VALUE")
                # As kustomize: a value wholly in single or double quotes loses them.
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                    value = value[1:-1]
                if key in data:
                    raise KustomizeError(f"{kpath}: {field} {g['name']}: {key} is given twice")
                data[key] = value
            doc = {"apiVersion": "v1", "kind": kind, "metadata": {"name": g["name"]}}
            if kind == "Secret":
                doc["type"] = "Opaque"
                data = {key: secret_base64(v) for key, v in data.items()}
            if data:
                doc["data"] = data
            out.append(doc)
    return out


def secret_base64(value):
    """A generated Secret's value as kustomize writes it: base64, and beyond 70 characters cut
    into lines of 70, each ended by a newline."""
    enc = base64.b64encode(value.encode()).decode()
    if len(enc) <= 70:
        return enc
    return "".join(enc[i : i + 70] + "\n" for i in range(0, len(enc), 70))


def content_hash(obj):
    """kustomize's name suffix (api/hasher): the sha256 of Go's JSON encoding of kind, data and
    (Secrets) type, its first 10 hex digits with 0, 1, 3, a, e mapped to g, h, k, m, t. Its
    name field is always empty: kustomize looks up the path `metadata/name` as one key."""
    m = {"kind": obj["kind"], "name": "", "data": obj.get("data", "")}
    if obj["kind"] == "ConfigMap" and isinstance(obj.get("binaryData"), dict):
        m["binaryData"] = obj["binaryData"]
    if obj["kind"] == "Secret":
        m["type"] = obj.get("type", "")
        if isinstance(obj.get("stringData"), dict):
            m["stringData"] = obj["stringData"]
    text = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Go's encoding/json escapes these three for HTML safety.
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def pod_specs(obj):
    """The pod specs of a workload (Pod, Deployment, StatefulSet, DaemonSet, Job, CronJob)."""
    spec = obj.get("spec", {})
    if obj.get("kind") == "Pod":
        return [spec]
    if obj.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    pod = spec.get("template", {}).get("spec")
    return [pod] if pod else []


def rename_references(obj, kind, old, new):
    for pod in pod_specs(obj):
        for v in pod.get("volumes", []):
            if kind == "ConfigMap" and v.get("configMap", {}).get("name") == old:
                v["configMap"]["name"] = new
            if kind == "Secret" and v.get("secret", {}).get("secretName") == old:
                v["secret"]["secretName"] = new
            for src in v.get("projected", {}).get("sources", []):
                ref = src.get("configMap" if kind == "ConfigMap" else "secret", {})
                if ref.get("name") == old:
                    ref["name"] = new
        if kind == "Secret":
            for ref in pod.get("imagePullSecrets", []):
                if ref.get("name") == old:
                    ref["name"] = new
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("configMapKeyRef" if kind == "ConfigMap" else "secretKeyRef", {})
                if ref.get("name") == old:
                    ref["name"] = new
            for e in c.get("envFrom", []):
                ref = e.get("configMapRef" if kind == "ConfigMap" else "secretRef", {})
                if ref.get("name") == old:
                    ref["name"] = new


def add_hash_suffixes(resources, generated):
    """Appends the content hash to every generated resource's name and renames the references."""
    for r in resources:
        key = (r["kind"], r["metadata"]["name"])
        if key not in generated:
            continue
        old = r["metadata"]["name"]
        new = f"{old}-{content_hash(r)}"
        r["metadata"]["name"] = new
        for other in resources:
            if other.get("metadata", {}).get("namespace") == r["metadata"].get("namespace"):
                rename_references(other, r["kind"], old, new)


def identity(r):
    md = r.get("metadata", {})
    return (r.get("kind"), md.get("namespace"), md.get("name"))


def same_target(resource, patch):
    return resource.get("kind") == patch.get("kind") and resource.get("metadata", {}).get("name") == patch.get(
        "metadata", {}
    ).get("name")


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        docs = build(argv[1])
    except KustomizeError as e:
        print(f"kustomize.py: {e}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
