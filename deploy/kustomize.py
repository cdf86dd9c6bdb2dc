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
- `patches` with `path`: strategic-merge patches, matched to their target by kind and name.
  Maps merge recursively; a `null` value deletes the key; the lists Kubernetes merges by key
  (containers and initContainers by name, env by name, volumes by name, volumeMounts by
  mountPath, container ports by containerPort, Service ports by port, topologySpreadConstraints
  by topologyKey) merge item by item, in the order Kubernetes' strategic merge gives (the
  patch's items first, then the remaining base items); every other list is replaced.

deploy/validate.py compares this renderer's output with `kubectl kustomize` when kubectl is on
the machine, so the two cannot drift apart unnoticed.
"""

import copy
import os
import sys

import yaml

SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "namespace", "images", "patches"}

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
    for r in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, r))
        docs = build(path) if os.path.isdir(path) else load_docs(path)
        for d in docs:
            ident = identity(d)
            if any(identity(x) == ident for x in resources):
                raise KustomizeError(f"{kpath}: {ident} is defined twice")
            resources.append(d)
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
    return resources


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
