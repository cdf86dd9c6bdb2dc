#!/usr/bin/env python3
"""Offline checks of the deployment files (run by deploy/validate.sh, inside deploy/.venv).

1. Kubernetes: renders the base and every overlay (deploy/kustomize.py; compared with
   `kubectl kustomize` when kubectl is installed), validates every rendered resource against
   the bundled Kubernetes JSON schemas (kubernetes-validate --strict, oldest and newest
   supported release), and checks what a safe rollout needs (probes, drain timing, replicas,
   HPA, PDB, resources, security context).
2. docker-compose.yml: the Compose specification's schema (check-jsonschema), and the cluster's
   shape (two edges on 8080/8081, a control node with gRPC, health-checked dependencies, a
   one-shot migration that runs first).
3. Dockerfile: hadolint, and a multi-stage build whose runtime stage runs as a non-root user.
4. Every SKUA_* variable the files set is one `skua` reads (crates/server/src).
5. No plain-text hop to a backend: every overlay and docker-compose.yml reach Postgres with
   sslmode=verify-full (or verify-ca), Redis with rediss:// and MQTT with mqtts://; the dev
   overlay's copies of deploy/compose's PKI script, mosquitto.conf and pg_hba.conf are identical
   to them.

Exits non-zero with every problem listed.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import kustomize  # noqa: E402

K8S = os.path.join(HERE, "kubernetes")
OVERLAYS = sorted(d for d in glob.glob(os.path.join(K8S, "overlays", "*")) if os.path.isdir(d))
# Oldest and newest Kubernetes releases the manifests must be valid for.
K8S_VERSIONS = ["1.30.0", "1.37.0"]
# Bus flush on shutdown (crates/server/src/node.rs: `bus().close(2 s)`) plus a margin.
BUS_FLUSH_S = 2
MARGIN_S = 3

problems = []


def problem(msg):
    problems.append(msg)
    print(f"  FAIL {msg}")


def ok(msg):
    print(f"  ok   {msg}")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def venv_bin(name):
    return os.path.join(os.path.dirname(sys.executable), name)


# --------------------------------------------------------------------------------------------
# SKUA_* variables


def known_variables():
    """The SKUA_* names `skua` reads: clap `env = "…"` attributes and std::env lookups."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, "crates", "server", "src", "**", "*.rs"), recursive=True):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(r'"(SKUA_[A-Z0-9_]+)"', f.read()))
    return names


def check_variables(where, names, known):
    for n in sorted(set(names)):
        if n.startswith("SKUA_") and n not in known:
            problem(f"{where}: {n} is not a setting skua reads")
    key = names.get("SKUA_ADMIN_KEY") if isinstance(names, dict) else None
    if key is not None and len(key) < 16:
        problem(f"{where}: SKUA_ADMIN_KEY must be at least 16 characters (skua refuses shorter keys)")


def parse_duration_s(v):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", str(v))
    if not m:
        raise ValueError(f"duration {v!r}")
    n, unit = int(m.group(1)), m.group(2)
    return {"ms": n / 1000, "s": n, "m": n * 60, "h": n * 3600}[unit]


# --------------------------------------------------------------------------------------------
# Kubernetes


def canonical(docs):
    return {kustomize.identity(d): d for d in docs}


def render_all():
    rendered = {}
    for d in [os.path.join(K8S, "base")] + OVERLAYS:
        name = os.path.relpath(d, K8S)
        try:
            rendered[name] = kustomize.build(d)
            ok(f"{name}: rendered {len(rendered[name])} resources")
        except kustomize.KustomizeError as e:
            problem(f"{name}: {e}")
    return rendered


def compare_with_kubectl(rendered):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("  note kubectl not installed: overlays rendered by deploy/kustomize.py only")
        return
    for name, docs in rendered.items():
        r = run([kubectl, "kustomize", os.path.join(K8S, name)])
        if r.returncode != 0:
            problem(f"{name}: kubectl kustomize failed: {r.stderr.strip()}")
            continue
        theirs = canonical(d for d in yaml.safe_load_all(r.stdout) if d)
        ours = canonical(docs)
        if theirs == ours:
            ok(f"{name}: identical to kubectl kustomize")
            continue
        for ident in sorted(set(theirs) | set(ours), key=str):
            if theirs.get(ident) != ours.get(ident):
                problem(f"{name}: {ident} differs from kubectl kustomize")


def schema_check(rendered):
    tool = venv_bin("kubernetes-validate")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name, docs in rendered.items():
            for i, d in enumerate(docs):
                path = os.path.join(tmp, f"{name.replace('/', '_')}-{i:02d}-{d['kind']}.yaml")
                with open(path, "w", encoding="utf-8") as f:
                    yaml.safe_dump(d, f)
                files.append(path)
        for version in K8S_VERSIONS:
            r = run([tool, "--strict", "--quiet", "-k", version, *files])
            if r.returncode != 0:
                problem(f"kubernetes-validate --strict -k {version}:\n{r.stdout}{r.stderr}")
            else:
                ok(f"{len(files)} rendered resources valid against the Kubernetes {version} schemas (strict)")


def find(docs, kind, name):
    return next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name), None)


def container_env(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def check_pod_hygiene(where, pod):
    sc = pod.get("securityContext", {})
    if not sc.get("runAsNonRoot"):
        problem(f"{where}: pod securityContext.runAsNonRoot must be true")
    if pod.get("automountServiceAccountToken") is not False:
        problem(f"{where}: automountServiceAccountToken must be false")
    for c in pod.get("containers", []):
        res = c.get("resources", {})
        if not res.get("requests") or not res.get("limits"):
            problem(f"{where}: container {c['name']} needs resource requests and limits")
        csc = c.get("securityContext", {})
        if csc.get("allowPrivilegeEscalation") is not False or not csc.get("readOnlyRootFilesystem"):
            problem(f"{where}: container {c['name']} must forbid privilege escalation and write no root fs")
        if "ALL" not in csc.get("capabilities", {}).get("drop", []):
            problem(f"{where}: container {c['name']} must drop ALL capabilities")


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def check_rollout(name, docs, known):
    before = len(problems)
    cm = find(docs, "ConfigMap", "skua-config")
    secret = find(docs, "Secret", "skua-secrets")
    edge = find(docs, "Deployment", "skua-edge")
    control = find(docs, "Deployment", "skua-control")
    job = find(docs, "Job", "skua-migrate")
    svc = find(docs, "Service", "skua-edge")
    csvc = find(docs, "Service", "skua-control")
    hpa = find(docs, "HorizontalPodAutoscaler", "skua-edge")
    pdb = find(docs, "PodDisruptionBudget", "skua-edge")
    for what, obj in [
        ("ConfigMap skua-config", cm),
        ("Secret skua-secrets", secret),
        ("Deployment skua-edge", edge),
        ("Deployment skua-control", control),
        ("Job skua-migrate", job),
        ("Service skua-edge", svc),
        ("Service skua-control", csvc),
        ("HorizontalPodAutoscaler skua-edge", hpa),
        ("PodDisruptionBudget skua-edge", pdb),
    ]:
        if obj is None:
            problem(f"{name}: {what} is missing")
    if None in (cm, secret, edge, control, job, svc, csvc, hpa, pdb):
        return
    config = cm.get("data", {})
    check_variables(f"{name} ConfigMap", config, known)
    check_variables(f"{name} Secret", secret.get("stringData", {}), known)

    pod = edge["spec"]["template"]["spec"]
    labels = edge["spec"]["template"]["metadata"]["labels"]
    (c,) = [x for x in pod["containers"] if x["name"] == "skua"]
    check_variables(f"{name} skua-edge", container_env(c), known)
    if edge["spec"].get("replicas", 1) < 2:
        problem(f"{name}: skua-edge needs at least 2 replicas")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
        problem(f"{name}: skua-edge readiness must probe /readyz")
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
        problem(f"{name}: skua-edge liveness must probe /healthz")
    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if len(pre_stop) != 2 or not pre_stop[0].endswith("sleep"):
        problem(f"{name}: skua-edge needs a preStop sleep (endpoint propagation before SIGTERM)")
        pre_stop = ["sleep", "0"]
    drain = parse_duration_s(config.get("SKUA_DRAIN_DELAY", "0s"))
    grace = parse_duration_s(config.get("SKUA_SHUTDOWN_GRACE", "10s"))
    needed = float(pre_stop[1]) + drain + grace + BUS_FLUSH_S + MARGIN_S
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    if tgps < needed:
        problem(f"{name}: terminationGracePeriodSeconds {tgps} < preStop + drain + grace + flush = {needed}")
    else:
        ok(f"{name}: terminationGracePeriodSeconds {tgps} covers preStop + drain + grace + flush ({needed:g} s)")
    if drain <= 0:
        problem(f"{name}: SKUA_DRAIN_DELAY must be above 0 so readiness fails before sockets close")
    strategy = edge["spec"].get("strategy", {}).get("rollingUpdate", {})
    if strategy.get("maxUnavailable") != 0:
        problem(f"{name}: skua-edge rolling updates must keep maxUnavailable 0")
    check_pod_hygiene(f"{name} skua-edge", pod)

    if not matches({"matchLabels": svc["spec"]["selector"]}, labels):
        problem(f"{name}: Service skua-edge does not select the edge pods")
    if svc["spec"].get("sessionAffinity", "None") != "None":
        problem(f"{name}: Service skua-edge must be sticky-free (sessionAffinity None)")
    if hpa["spec"]["scaleTargetRef"]["name"] != "skua-edge" or hpa["spec"].get("minReplicas", 1) < 2:
        problem(f"{name}: the HPA must scale skua-edge with minReplicas >= 2")
    if not matches(pdb["spec"]["selector"], labels):
        problem(f"{name}: the PodDisruptionBudget does not select the edge pods")

    cpod = control["spec"]["template"]["spec"]
    (cc,) = [x for x in cpod["containers"] if x["name"] == "skua"]
    check_variables(f"{name} skua-control", container_env(cc), known)
    if container_env(cc).get("SKUA_GRPC_LISTEN") != "0.0.0.0:50051":
        problem(f"{name}: skua-control must listen for gRPC on 0.0.0.0:50051")
    if not any(p["port"] == 50051 for p in csvc["spec"]["ports"]):
        problem(f"{name}: Service skua-control must expose 50051")
    if not matches({"matchLabels": csvc["spec"]["selector"]}, control["spec"]["template"]["metadata"]["labels"]):
        problem(f"{name}: Service skua-control does not select the control pods")
    check_pod_hygiene(f"{name} skua-control", cpod)

    jpod = job["spec"]["template"]["spec"]
    if jpod["containers"][0].get("args") != ["migrate"]:
        problem(f"{name}: Job skua-migrate must run `skua migrate`")
    check_pod_hygiene(f"{name} skua-migrate", jpod)
    if len(problems) == before:
        ok(f"{name}: rollout checks (probes, drain timing, replicas, HPA, PDB, resources, security)")


# --------------------------------------------------------------------------------------------
# TLS to the backends

PLAIN_SCHEMES = ("mqtt://", "tcp://", "redis://", "redis+unix://")
STORE_SCHEMES = ("postgres://", "postgresql://")


def plaintext_backend_url(value):
    """Why `value` is a plain-text (or unverified) backend url, or None."""
    v = str(value).strip()
    if v.startswith(PLAIN_SCHEMES):
        return f"{v.split('://')[0]}:// is plain text (use mqtts:// or rediss://)"
    if v.startswith(STORE_SCHEMES):
        mode = re.search(r"[?&]sslmode=([a-z-]+)", v)
        if not mode or mode.group(1) not in ("verify-full", "verify-ca"):
            return "Postgres without sslmode=verify-full (or verify-ca)"
    if "sslmode=disable" in v:
        return "sslmode=disable"
    return None


def backend_urls(docs):
    """(where, value) of every ConfigMap/Secret value and container env value."""
    for d in docs:
        name = f"{d['kind']} {d['metadata']['name']}"
        if d["kind"] in ("ConfigMap", "Secret"):
            for k, v in {**d.get("data", {}), **d.get("stringData", {})}.items():
                if isinstance(v, str) and "\n" not in v.strip():
                    yield f"{name} {k}", v
        pod = d.get("spec", {}).get("template", {}).get("spec", {})
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            for e in c.get("env", []):
                if "value" in e:
                    yield f"{name} {c['name']} {e['name']}", e["value"]


def check_backend_tls(rendered, compose):
    before = len(problems)
    for name, docs in rendered.items():
        if not name.startswith("overlays/"):
            continue
        for where, value in backend_urls(docs):
            why = plaintext_backend_url(value)
            if why:
                problem(f"{name}: {where}: {why}")
    for svc, s in compose.get("services", {}).items():
        env = s.get("environment", {})
        items = env.items() if isinstance(env, dict) else (e.split("=", 1) for e in env if "=" in e)
        for k, v in items:
            why = plaintext_backend_url(v)
            if why:
                problem(f"docker-compose.yml: {svc} {k}: {why}")
    # The dev overlay carries copies of deploy/compose's files in ConfigMaps.
    dev = rendered.get("overlays/dev", [])
    for cm, key, path in [
        ("dev-pki-script", "make-dev-certs.sh", "compose/make-dev-certs.sh"),
        ("mosquitto-config", "mosquitto.conf", "compose/mosquitto.conf"),
        ("postgres-config", "pg_hba.conf", "compose/pg_hba.conf"),
    ]:
        obj = find(dev, "ConfigMap", cm)
        with open(os.path.join(HERE, path), encoding="utf-8") as f:
            want = f.read()
        if obj is None or obj.get("data", {}).get(key) != want:
            problem(f"overlays/dev: ConfigMap {cm} {key} must be a copy of deploy/{path}")
    if len(problems) == before:
        ok("overlays and docker-compose.yml: every backend url uses TLS (mqtts, rediss, sslmode=verify-full); dev copies in sync")


# --------------------------------------------------------------------------------------------
# Compose and Dockerfile


def check_compose(known):
    path = os.path.join(ROOT, "docker-compose.yml")
    r = run([venv_bin("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", path])
    if r.returncode != 0:
        problem(f"docker-compose.yml: compose-spec schema:\n{r.stdout}{r.stderr}")
    else:
        ok("docker-compose.yml: valid against the Compose specification schema")
    with open(path, encoding="utf-8") as f:
        compose = yaml.safe_load(f)
    services = compose.get("services", {})
    before = len(problems)
    for dep in ("postgres", "redis", "mqtt"):
        if "healthcheck" not in services.get(dep, {}):
            problem(f"docker-compose.yml: {dep} needs a healthcheck the nodes can wait for")
        pki = services.get(dep, {}).get("depends_on", {}).get("pki", {})
        if pki.get("condition") != "service_completed_successfully":
            problem(f"docker-compose.yml: {dep} must start after the pki service made the certificates")
    if services.get("pki", {}).get("restart") != "no":
        problem("docker-compose.yml: pki must be a one-shot service (restart: \"no\")")
    migrate = services.get("migrate", {})
    if migrate.get("command") != ["migrate"] or migrate.get("restart") != "no":
        problem("docker-compose.yml: migrate must be a one-shot `skua migrate`")
    # Published on 127.0.0.1 by default (the credentials are development values); host address
    # and ports may be overridden (`${VAR:-default}`, compared by their defaults).
    published = {"edge-1": "127.0.0.1:8080:8080", "edge-2": "127.0.0.1:8081:8080", "control": "127.0.0.1:50051:50051"}
    for svc, port in published.items():
        s = services.get(svc)
        if s is None:
            problem(f"docker-compose.yml: service {svc} is missing")
            continue
        if port not in [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(p)) for p in s.get("ports", [])]:
            problem(f"docker-compose.yml: {svc} must publish {port}")
        deps = s.get("depends_on", {})
        if deps.get("migrate", {}).get("condition") != "service_completed_successfully":
            problem(f"docker-compose.yml: {svc} must start after migrate succeeded")
        for dep in ("postgres", "redis", "mqtt"):
            if deps.get(dep, {}).get("condition") != "service_healthy":
                problem(f"docker-compose.yml: {svc} must wait for {dep} to be healthy")
        env = s.get("environment", {})
        check_variables(f"docker-compose.yml {svc}", env, known)
        needed = parse_duration_s(env.get("SKUA_DRAIN_DELAY", "0s")) + parse_duration_s(
            env.get("SKUA_SHUTDOWN_GRACE", "10s")
        )
        if parse_duration_s(s.get("stop_grace_period", "10s")) < needed + BUS_FLUSH_S:
            problem(f"docker-compose.yml: {svc} stop_grace_period must exceed drain delay + grace + flush")
    if services.get("control", {}).get("environment", {}).get("SKUA_GRPC_LISTEN") != "0.0.0.0:50051":
        problem("docker-compose.yml: control must listen for gRPC on 0.0.0.0:50051")
    if len(problems) == before:
        ok("docker-compose.yml: cluster shape (2 edges, control, health-checked deps, pki and migrate first)")
    return compose


def check_dockerfile():
    path = os.path.join(ROOT, "Dockerfile")
    r = run([venv_bin("hadolint"), "--no-color", path])
    if r.returncode != 0:
        problem(f"Dockerfile: hadolint:\n{r.stdout}{r.stderr}")
    else:
        ok("Dockerfile: hadolint clean")
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    stages = [i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")]
    if len(stages) < 2:
        problem("Dockerfile: must be a multi-stage build")
        return
    runtime = lines[stages[-1] :]
    users = [ln.split()[1] for ln in runtime if ln.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problem("Dockerfile: the runtime stage must switch to a non-root user")
    if any("cargo" in ln or "rustc" in ln for ln in runtime):
        problem("Dockerfile: the runtime stage must not carry build tools")
    if "rust" in runtime[0]:
        problem("Dockerfile: the runtime stage must not be based on a Rust image")
    ok("Dockerfile: multi-stage, non-root runtime without build tools")


def selftest():
    """The renderer's strategic merge on a case `kubectl kustomize` was seen to render (kept here
    so the semantics are checked on machines without kubectl too)."""
    base = {"containers": [{"name": "a", "env": [{"name": "E1"}, {"name": "E2", "value": "2"}, {"name": "E3"}]},
                           {"name": "b", "args": ["x", "y"]}]}
    patch = {"containers": [{"name": "c"}, {"name": "a", "env": [{"name": "N1"}, {"name": "E2", "value": "two"}]},
                            {"name": "b", "args": ["z"], "image": None}]}
    want = {"containers": [{"name": "c"},
                           {"name": "a", "env": [{"name": "N1"}, {"name": "E2", "value": "two"}, {"name": "E1"},
                                                 {"name": "E3"}]},
                           {"name": "b", "args": ["z"]}]}
    got = kustomize.strategic_merge(base, patch)
    if got != want:
        problem(f"kustomize.py strategic merge: got {got}, want {want}")
    else:
        ok("kustomize.py: strategic merge by key, list order, list replacement, null deletion")


def main():
    known = known_variables()
    print("== Kubernetes manifests")
    selftest()
    rendered = render_all()
    compare_with_kubectl(rendered)
    schema_check(rendered)
    for name in [os.path.relpath(d, K8S) for d in OVERLAYS]:
        if name in rendered:
            check_rollout(name, rendered[name], known)
    print("== docker-compose.yml")
    compose = check_compose(known)
    print("== TLS to the backends")
    check_backend_tls(rendered, compose)
    print("== Dockerfile")
    check_dockerfile()
    if problems:
        print(f"deploy validation: {len(problems)} problem(s)")
        return 1
    print("deploy validation: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
