#!/usr/bin/env python3
"""Offline checks of the deployment files (run by deploy/validate.sh, inside deploy/.venv).

1. Kubernetes: renders the base, every overlay and kubernetes/emqx (deploy/kustomize.py;
   compared with `kubectl kustomize`; without kubectl a reported skip, a failure under
   CI=true), validates every rendered resource but custom resources against the bundled Kubernetes JSON schemas
   (kubernetes-validate --strict, oldest and newest supported release), and checks what a safe
   rollout needs: probes; drain timing (preStop, drain delay, spread, grace) within the grace
   period; the production NLB (AWS Load Balancer Controller, IP targets, pod readiness gates,
   deregistration delay >= the grace, no connection termination, /readyz health check, wss://
   on 443); minReadySeconds; no `replicas` on an HPA-managed Deployment; an HPA on CPU and memory; edges' memory request equal to their limit;
   PDB; resources; security context; generated (hash-suffixed) config.
2. Credentials: the admin key on the control plane only; the schema owner's credential in the
   migrate init containers only, the nodes on the DML-only one; the edges' bus, presence and
   store named explicitly; no placeholder or development value in a production overlay.
3. NetworkPolicies: a default deny and explicit allows for every workload; the EMQX tier
   authenticated, confined by an ACL to the cluster's namespace, TLS only, reachable from
   Skua's namespace only.
4. Monitoring (deploy/monitoring): the alert rules' structure, every PromQL query of the rules
   and the dashboard parsed (deploy/promql.py), every metric name found in Skua's sources (or
   listed as pending or external), the PrometheusRule identical to the rule file, the
   PodMonitor on the pods' metrics port.
5. docker-compose.yml: the Compose specification's schema (check-jsonschema), and the cluster's
   shape (two edges on 8080/8081, a control node with gRPC, health-checked dependencies, a
   one-shot migration that runs first).
6. Dockerfile: hadolint, and a multi-stage build whose runtime stage runs as a non-root user.
7. Every SKUA_* variable the files set is one `skua` reads (crates/server/src).
8. No plain-text hop to a backend: every overlay and docker-compose.yml reach Postgres with
   sslmode=verify-full (or verify-ca), Redis with rediss:// and MQTT with mqtts://; the dev
   overlay's copies of deploy/compose's PKI script, mosquitto.conf and pg_hba.conf are identical
   to them.
9. Issue 32: the production HPA on connections per pod (prometheus-adapter) and maxSurge 25-50 %;
   startupProbes and probe schemes; zone spread DoNotSchedule and control-plane anti-affinity;
   no egress to the cloud metadata endpoint; `promtool test rules` on the alert rules' unit
   tests (skipped loudly without promtool, failing under CI=true); the Dockerfile's
   SKUA_GIT_SHA argument and a HEALTHCHECK that works with TLS; compose's edge-3 mirroring
   edge-1; every `deploy/README.md "Section"` reference naming an existing heading.

Self-tests re-introduce each guarded mistake into the rendered files and check it is refused.
Exits non-zero with every problem listed.
"""

import base64
import contextlib
import copy
import glob
import io
import json
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
import promql  # noqa: E402

K8S = os.path.join(HERE, "kubernetes")
OVERLAYS = sorted(d for d in glob.glob(os.path.join(K8S, "overlays", "*")) if os.path.isdir(d))
# Overlays allowed to commit credentials (development values); every other overlay is treated as
# production and may carry no placeholder and no development value.
DEV_OVERLAYS = {"overlays/dev"}
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


def skipped(msg):
    """A check that could not run (issue 35: no skip passes silently): a failure under CI=true;
    elsewhere printed and appended to the skip report of scripts/test.sh ($SKUA_TEST_SKIP_LOG),
    which lists it at the end."""
    if os.environ.get("CI", "").lower() == "true":
        problem(f"{msg}; CI=true requires it")
        return
    print(f"  SKIP {msg}")
    log = os.environ.get("SKUA_TEST_SKIP_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"deploy/validate.py: {msg}\n")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def venv_bin(name):
    return os.path.join(os.path.dirname(sys.executable), name)


# --------------------------------------------------------------------------------------------
# SKUA_* variables


def known_variables():
    """The SKUA_* names `skua` reads: clap `env = "…"` attributes and std::env lookups.

    Each crate declares the settings it owns (`skua_core::settings!`), so every crate the binary
    is built from is read, not only the server's; test and bench crates are not part of it.
    """
    names = set()
    linked = ("server", "engine", "edge", "control", "webhooks", "mqtt", "core", "store", "bus", "presence", "protocol")
    paths = []
    for crate in linked:
        paths += glob.glob(os.path.join(ROOT, "crates", crate, "src", "**", "*.rs"), recursive=True)
    for path in paths:
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
    for d in [os.path.join(K8S, "base")] + OVERLAYS + [os.path.join(K8S, "emqx")]:
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
        skipped("kubectl not installed: the overlays were not compared with `kubectl kustomize`")
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


# Custom resources (the EMQX Operator's, the Prometheus Operator's): no bundled schema, checked
# by the functions below instead.
CUSTOM_GROUPS = {"apps.emqx.io", "monitoring.coreos.com"}


def schema_check(rendered):
    tool = venv_bin("kubernetes-validate")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name, docs in rendered.items():
            for i, d in enumerate(d for d in docs if d["apiVersion"].split("/")[0] not in CUSTOM_GROUPS):
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
    """The resource `kind`/`name`; for a generated ConfigMap or Secret, `name` is the name before
    kustomize's hash suffix."""
    for d in docs:
        if d["kind"] == kind and generated_name(d["metadata"]["name"], d["kind"]) == name:
            return d
    return None


def generated_name(name, kind):
    """`name` without kustomize's 10-character hash suffix (ConfigMaps and Secrets only)."""
    if kind in ("ConfigMap", "Secret") and re.fullmatch(r".+-[a-z0-9]{10}", name):
        return name[:-11]
    return name


def container_env(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def secret_ref(env, name):
    """(secret, key, optional) of env var `name` read from a Secret, or None."""
    for e in env:
        if e["name"] == name:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                return generated_name(ref["name"], "Secret"), ref["key"], bool(ref.get("optional"))
    return None


def secret_names_used(c):
    """Every Secret a container reads (env, envFrom), without hash suffixes."""
    names = {generated_name(e["valueFrom"]["secretKeyRef"]["name"], "Secret")
             for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
    names |= {generated_name(e["secretRef"]["name"], "Secret") for e in c.get("envFrom", []) if "secretRef" in e}
    return names


def secret_values(secret):
    """A Secret's values as text: stringData, and data decoded from base64."""
    values = dict(secret.get("stringData", {}))
    for k, v in secret.get("data", {}).items():
        try:
            values[k] = base64.b64decode("".join(str(v).split())).decode()
        except (ValueError, UnicodeDecodeError):
            values[k] = ""
    return values


def check_pod_hygiene(where, pod):
    sc = pod.get("securityContext", {})
    if not sc.get("runAsNonRoot"):
        problem(f"{where}: pod securityContext.runAsNonRoot must be true")
    if pod.get("automountServiceAccountToken") is not False:
        problem(f"{where}: automountServiceAccountToken must be false")
    for c in pod.get("initContainers", []) + pod.get("containers", []):
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


def quantity_bytes(q):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    if not m:
        raise ValueError(f"quantity {q!r}")
    mult = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(m.group(1)) * mult[m.group(2)]


# The three backends an edge must name explicitly: without one it would fall back to the
# in-process bus or presence (or the SQLite store) and run alone while reporting ready.
CLUSTER_BACKENDS = ("SKUA_STORE", "SKUA_PRESENCE", "SKUA_BUS")
# Secrets of the base (kubernetes/base/kustomization.yaml): the nodes' (DML-only store user),
# the control plane's admin key, and the migrate init containers' (the schema's owner).
NODE_SECRET, ADMIN_SECRET, MIGRATOR_SECRET = "skua-secrets", "skua-admin-key", "skua-migrator"


def drain_budget(config, pre_stop_s):
    """Seconds a pod needs from the start of its termination to a clean exit: preStop, drain
    delay, the spread of the closes, the grace, the bus flush and a margin (the spread and the
    grace counted one after the other, which covers either way the server combines them)."""
    drain = parse_duration_s(config.get("SKUA_DRAIN_DELAY", "0s"))
    spread = parse_duration_s(config.get("SKUA_DRAIN_SPREAD", "0s"))
    grace = parse_duration_s(config.get("SKUA_SHUTDOWN_GRACE", "10s"))
    return pre_stop_s + drain + spread + grace + BUS_FLUSH_S + MARGIN_S


AWS = "service.beta.kubernetes.io/aws-load-balancer-"
# Seconds from a pod's termination until the AWS Load Balancer Controller has deregistered its
# IP target and the NLB sends it no new connection: the endpoint change, the controller's
# reconcile and the NLB's propagation (often 10-20 s; AWS states no bound). The preStop sleep,
# during which the pod still serves, must cover it.
NLB_DEREGISTRATION_S = 20


def target_group_attributes(svc):
    """The AWS target-group attributes annotation as a dict (`k=v,k=v`)."""
    raw = svc.get("metadata", {}).get("annotations", {}).get(AWS + "target-group-attributes", "")
    return dict(kv.strip().split("=", 1) for kv in raw.split(",") if "=" in kv)


def check_load_balancer(name, docs, config, edge, svc, pre_stop_s, tgps):
    """The production edge Service on AWS (issue 32, items 1 and 5): an NLB of the AWS Load
    Balancer Controller with IP targets and pod readiness gates, target-group attributes that
    let Skua's drain finish (deregistration delay >= the termination grace, no connection
    termination at its end nor on an unhealthy target), a health check on /readyz in the
    listener's scheme, a preStop covering the deregistration, and wss:// on port 443."""
    if svc["spec"].get("type") != "LoadBalancer":
        return
    a = svc.get("metadata", {}).get("annotations", {})
    where = f"{name}: Service skua-edge"
    tls = bool(config.get("SKUA_TLS_CERT"))
    # Item 5: with TLS passed through, clients dial wss://host/ws, i.e. port 443.
    ports = svc["spec"].get("ports", [])
    listener = {p.get("name"): p["containerPort"] for c in edge["spec"]["template"]["spec"]["containers"]
                if c["name"] == "skua" for p in c.get("ports", [])}
    if tls:
        https = [p for p in ports if p["port"] == 443]
        if not https or https[0].get("targetPort") not in ("http", listener.get("http")):
            problem(f"{where}: with TLS on the edges (SKUA_TLS_CERT) the Service must listen on 443 and pass it to "
                    f"the edges' TLS listener (targetPort http): wss://host/ws finds nothing on another port")
        if any(p["port"] == 80 for p in ports):
            problem(f"{where}: port 80 with TLS passed through serves TLS on the plain-HTTP port; expose 443 only")
    if not any(k.startswith(AWS) for k in a):
        print(f"  note {where}: a LoadBalancer without AWS annotations; give yours pod targets, connection "
              "draining >= terminationGracePeriodSeconds and a /readyz health check (deploy/README.md, \"Rolling restarts\")")
        return
    before = len(problems)
    if svc["spec"].get("loadBalancerClass") != "service.k8s.aws/nlb" and a.get(AWS + "type") != "external":
        problem(f"{where}: the NLB must be the AWS Load Balancer Controller's (loadBalancerClass service.k8s.aws/nlb), "
                "not the in-tree controller's (no IP targets, no readiness gates, no target-group attributes)")
    if a.get(AWS + "nlb-target-type") != "ip":
        problem(f"{where}: aws-load-balancer-nlb-target-type must be ip: with instance targets a node's health check "
                "fails when its edge terminates and the NLB resets its connections before the drain")
    if svc["spec"].get("externalTrafficPolicy") == "Local" and a.get(AWS + "nlb-target-type") != "ip":
        problem(f"{where}: externalTrafficPolicy Local with instance targets resets connections of terminating edges")
    ns = edge["metadata"].get("namespace")
    namespace = find(docs, "Namespace", ns) if ns else None
    gate = (namespace or {}).get("metadata", {}).get("labels", {}).get("elbv2.k8s.aws/pod-readiness-gate-inject")
    if gate != "enabled":
        problem(f"{name}: Namespace {ns} needs the label elbv2.k8s.aws/pod-readiness-gate-inject: enabled (pod readiness "
                "gates: a new edge is ready only once its NLB target is healthy)")
    attrs = target_group_attributes(svc)
    try:
        delay = int(attrs.get("deregistration_delay.timeout_seconds", "300"))
    except ValueError:
        problem(f"{where}: deregistration_delay.timeout_seconds must be an integer")
        delay = 0
    if delay < tgps:
        problem(f"{where}: deregistration_delay.timeout_seconds {delay} < terminationGracePeriodSeconds {tgps}: the "
                "NLB would drop a terminating edge's connections before Skua's drain closed them 1012")
    for attr in ("deregistration_delay.connection_termination.enabled",
                 "target_health_state.unhealthy.connection_termination.enabled"):
        # The second defaults to true on AWS: it must be set to false.
        default = "false" if attr.startswith("deregistration") else "true"
        if attrs.get(attr, default).lower() != "false":
            problem(f"{where}: target-group attribute {attr}=false is required (a draining edge answers /readyz 503; "
                    "its connections must not be reset)")
    if a.get(AWS + "healthcheck-path") != "/readyz":
        problem(f"{where}: the NLB health check must ask /readyz (503 only while an edge drains)")
    want = "HTTPS" if tls else "HTTP"
    if a.get(AWS + "healthcheck-protocol", "TCP").upper() != want:
        problem(f"{where}: aws-load-balancer-healthcheck-protocol must be {want} (the listener's scheme)")
    if pre_stop_s < NLB_DEREGISTRATION_S:
        problem(f"{name}: skua-edge preStop {pre_stop_s:g} s < {NLB_DEREGISTRATION_S} s, the time the NLB takes to stop "
                "sending new connections to a deregistered target")
    if len(problems) == before:
        ok(f"{name}: AWS NLB with IP targets and readiness gates, deregistration delay {delay} s >= grace {tgps} s, "
           f"no connection termination, /readyz over {want}, preStop {pre_stop_s:g} s >= {NLB_DEREGISTRATION_S} s")


# The longest a node may take to start serving (a large registry loads before the listener
# accepts): the startupProbe must allow at least this before liveness takes over.
STARTUP_BUDGET_S = 120


def check_probes(where, c, tls):
    """A startupProbe on /healthz with a budget of STARTUP_BUDGET_S (issue 32, item 8: without
    it, liveness killed nodes whose registry took longer than ~35 s to load), and every probe in
    the listener's scheme (HTTPS when SKUA_TLS_CERT puts the listener on TLS)."""
    sp = c.get("startupProbe", {})
    if sp.get("httpGet", {}).get("path") != "/healthz":
        problem(f"{where} needs a startupProbe on /healthz (a large registry loads before the listener accepts)")
    elif sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3) < STARTUP_BUDGET_S:
        problem(f"{where}: the startupProbe allows {sp.get('periodSeconds', 10) * sp.get('failureThreshold', 3)} s, "
                f"below {STARTUP_BUDGET_S} s")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        scheme = c.get(probe, {}).get("httpGet", {}).get("scheme", "HTTP")
        if probe in c and scheme != ("HTTPS" if tls else "HTTP"):
            problem(f"{where}: {probe} must use {'HTTPS' if tls else 'HTTP'} (the listener {'serves TLS' if tls else 'is plain'})")


def check_placement(name, edge, control):
    """Production placement (issue 32, item 8): edges spread over zones with DoNotSchedule (a
    zone's outage takes only its share), control-plane pods never on one node."""
    spread = edge["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
    zone = [t for t in spread if t.get("topologyKey") == "topology.kubernetes.io/zone"]
    if not zone or zone[0].get("whenUnsatisfiable") != "DoNotSchedule":
        problem(f"{name}: skua-edge needs a zone topologySpreadConstraint with whenUnsatisfiable DoNotSchedule")
    labels = control["spec"]["template"]["metadata"]["labels"]
    anti = control["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {})
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", []) + [
        t.get("podAffinityTerm", {}) for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    if not any(t.get("topologyKey") == "kubernetes.io/hostname" and matches(t.get("labelSelector", {}), labels)
               and t.get("labelSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "control"
               for t in terms):
        problem(f"{name}: skua-control needs a podAntiAffinity on kubernetes.io/hostname against its own pods")


METADATA_V4 = "169.254.169.254"
METADATA_V6 = "fd00:ec2::254"


def reaches_metadata(rule):
    """Whether a NetworkPolicy egress rule lets pods reach the cloud's instance metadata
    endpoint: no `to` (any address) or an ipBlock covering it without excepting it; a rule for
    DNS only (port 53) is not counted."""
    import ipaddress

    ports = {p.get("port") for p in rule.get("ports", [])}
    if ports and ports <= {53}:
        return False
    if "to" not in rule:
        return True
    for peer in rule["to"]:
        block = peer.get("ipBlock")
        if not block:
            continue
        net = ipaddress.ip_network(block["cidr"], strict=False)
        for addr in (METADATA_V4, METADATA_V6):
            ip = ipaddress.ip_address(addr)
            if ip.version == net.version and ip in net and not any(
                    ip in ipaddress.ip_network(e, strict=False) for e in block.get("except", [])
                    if ipaddress.ip_network(e, strict=False).version == ip.version):
                return True
    return False


def check_metadata_egress(name, docs):
    """No NetworkPolicy lets a pod reach 169.254.169.254 (the cloud's credentials)."""
    for p in (d for d in docs if d["kind"] == "NetworkPolicy"):
        for i, rule in enumerate(p["spec"].get("egress", [])):
            if reaches_metadata(rule):
                problem(f"{name}: NetworkPolicy {p['metadata']['name']} egress rule {i} reaches the cloud's metadata "
                        f"endpoint ({METADATA_V4}): give it `to: ipBlock` with `except: [{METADATA_V4}/32]`")


# The custom metric the production HPA scales on, served by prometheus-adapter
# (monitoring/prometheus-adapter-values.yaml).
CONNECTIONS_METRIC = "skua_connections_open"


def check_connections_metric(name, config, hpa):
    """A production HPA scales on open connections per pod too (issue 32, item 2), with a target
    at most half of max_connections, so the last old edges of a rollout stay below the cap."""
    pods = [m["pods"] for m in hpa["spec"].get("metrics", []) if m["type"] == "Pods"]
    metric = [p for p in pods if p.get("metric", {}).get("name") == CONNECTIONS_METRIC]
    if not metric:
        problem(f"{name}: the edge HPA must also scale on {CONNECTIONS_METRIC} per pod (a Pods metric through "
                "prometheus-adapter): CPU and memory do not follow idle WebSockets")
        return
    cap = int(config.get("SKUA_MAX_CONNECTIONS", "100000"))
    try:
        target = float(quantity_bytes(metric[0]["target"]["averageValue"]))
    except (KeyError, ValueError):
        problem(f"{name}: the HPA's {CONNECTIONS_METRIC} target must be an averageValue")
        return
    if target > cap / 2:
        problem(f"{name}: the HPA's {CONNECTIONS_METRIC} target {target:g} is above half of max_connections "
                f"({cap}): rollouts and reconnect waves would push edges to the cap")
    with open(os.path.join(HERE, "monitoring", "prometheus-adapter-values.yaml"), encoding="utf-8") as f:
        adapter = yaml.safe_load(f)
    served = {r.get("name", {}).get("as") for r in adapter.get("rules", {}).get("custom", [])}
    if CONNECTIONS_METRIC not in served:
        problem(f"monitoring/prometheus-adapter-values.yaml: no rule serves {CONNECTIONS_METRIC} to the HPA")


def check_rollout(name, docs, known):
    before = len(problems)
    cm = find(docs, "ConfigMap", "skua-config")
    edge = find(docs, "Deployment", "skua-edge")
    control = find(docs, "Deployment", "skua-control")
    svc = find(docs, "Service", "skua-edge")
    csvc = find(docs, "Service", "skua-control")
    hpa = find(docs, "HorizontalPodAutoscaler", "skua-edge")
    pdb = find(docs, "PodDisruptionBudget", "skua-edge")
    for what, obj in [
        ("ConfigMap skua-config", cm),
        ("Deployment skua-edge", edge),
        ("Deployment skua-control", control),
        ("Service skua-edge", svc),
        ("Service skua-control", csvc),
        ("HorizontalPodAutoscaler skua-edge", hpa),
        ("PodDisruptionBudget skua-edge", pdb),
    ]:
        if obj is None:
            problem(f"{name}: {what} is missing")
    if None in (cm, edge, control, svc, csvc, hpa, pdb):
        return
    if cm["metadata"]["name"] == "skua-config":
        problem(f"{name}: skua-config must be generated (configMapGenerator) so a change rolls the pods")
    config = cm.get("data", {})
    check_variables(f"{name} ConfigMap", config, known)
    # Both Deployments read skua-config: with SKUA_CLUSTER=true a node whose Secret lost
    # SKUA_BUS or SKUA_PRESENCE refuses to start instead of running alone on in-process backends.
    if str(config.get("SKUA_CLUSTER", "")).strip().lower() != "true":
        problem(f"{name}: skua-config must set SKUA_CLUSTER=true (every node of the cluster refuses to start without shared backends)")
    for secret in (d for d in docs if d["kind"] == "Secret"):
        sname = generated_name(secret["metadata"]["name"], "Secret")
        if sname in (NODE_SECRET, ADMIN_SECRET, MIGRATOR_SECRET):
            check_variables(f"{name} Secret {sname}", secret_values(secret), known)
            if secret["metadata"]["name"] == sname:
                problem(f"{name}: Secret {sname} must be generated (secretGenerator) so a change rolls the pods")
            if sname != ADMIN_SECRET and "SKUA_ADMIN_KEY" in secret_values(secret):
                problem(f"{name}: Secret {sname} must not carry SKUA_ADMIN_KEY (only {ADMIN_SECRET} does)")

    # HPA-managed Deployments: no `replicas`, or every `kubectl apply` resets the scaled fleet.
    for h in (d for d in docs if d["kind"] == "HorizontalPodAutoscaler"):
        target = find(docs, h["spec"]["scaleTargetRef"]["kind"], h["spec"]["scaleTargetRef"]["name"])
        if target is not None and "replicas" in target["spec"]:
            problem(f"{name}: {target['kind']} {target['metadata']['name']} is scaled by an HPA and must not set replicas")
    resources = {m.get("resource", {}).get("name") for m in hpa["spec"].get("metrics", []) if m["type"] == "Resource"}
    if not {"cpu", "memory"} <= resources:
        problem(f"{name}: the edge HPA must scale on cpu and memory (has {sorted(r for r in resources if r)})")

    pod = edge["spec"]["template"]["spec"]
    labels = edge["spec"]["template"]["metadata"]["labels"]
    (c,) = [x for x in pod["containers"] if x["name"] == "skua"]
    check_variables(f"{name} skua-edge", container_env(c), known)
    for var in CLUSTER_BACKENDS:
        ref = secret_ref(c.get("env", []), var)
        if ref is None and not container_env(c).get(var):
            problem(f"{name}: skua-edge must set {var} explicitly (env value or secretKeyRef), not through envFrom")
        elif ref is not None and ref[2]:
            problem(f"{name}: skua-edge {var} must not be optional (a missing key must stop the pod)")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
        problem(f"{name}: skua-edge readiness must probe /readyz")
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
        problem(f"{name}: skua-edge liveness must probe /healthz")
    tls = bool(config.get("SKUA_TLS_CERT"))
    for dep, d in (("skua-edge", edge), ("skua-control", control)):
        (dc,) = [x for x in d["spec"]["template"]["spec"]["containers"] if x["name"] == "skua"]
        check_probes(f"{name}: {dep}", dc, tls)
    if name not in DEV_OVERLAYS:
        check_placement(name, edge, control)
    mem = c.get("resources", {})
    try:
        req, lim = quantity_bytes(mem["requests"]["memory"]), quantity_bytes(mem["limits"]["memory"])
        if req != lim:
            problem(f"{name}: skua-edge memory request must equal its limit (not evictable under node memory pressure)")
    except (KeyError, ValueError) as e:
        problem(f"{name}: skua-edge memory request and limit: {e}")

    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if len(pre_stop) != 2 or not pre_stop[0].endswith("sleep"):
        problem(f"{name}: skua-edge needs a preStop sleep (endpoint propagation before SIGTERM)")
        pre_stop = ["sleep", "0"]
    pre_stop_s = float(pre_stop[1])
    needed = drain_budget(config, pre_stop_s)
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    if tgps < needed:
        problem(f"{name}: skua-edge terminationGracePeriodSeconds {tgps} < preStop + drain + spread + grace + flush = {needed:g}")
    else:
        ok(f"{name}: skua-edge terminationGracePeriodSeconds {tgps} covers preStop + drain + spread + grace + flush ({needed:g} s)")
    if parse_duration_s(config.get("SKUA_DRAIN_DELAY", "0s")) <= 0:
        problem(f"{name}: SKUA_DRAIN_DELAY must be above 0 so readiness fails before sockets close")
    spread = parse_duration_s(config.get("SKUA_DRAIN_SPREAD", "0s"))
    if spread <= 0:
        problem(f"{name}: SKUA_DRAIN_SPREAD must be above 0 so the 1012 closes do not all land at once")
    elif spread >= parse_duration_s(config.get("SKUA_SHUTDOWN_GRACE", "10s")):
        problem(f"{name}: SKUA_DRAIN_SPREAD must be below SKUA_SHUTDOWN_GRACE (the last closes need time to finish)")
    min_ready = edge["spec"].get("minReadySeconds", 0)
    if min_ready < 5:
        problem(f"{name}: skua-edge needs minReadySeconds (>= 5) so a rollout waits for a new edge to settle")
    check_load_balancer(name, docs, config, edge, svc, pre_stop_s, tgps)
    strategy = edge["spec"].get("strategy", {}).get("rollingUpdate", {})
    if strategy.get("maxUnavailable") != 0:
        problem(f"{name}: skua-edge rolling updates must keep maxUnavailable 0")
    surge = re.fullmatch(r"(\d+)%", str(strategy.get("maxSurge", "")))
    if not surge or not 25 <= int(surge.group(1)) <= 50:
        problem(f"{name}: skua-edge maxSurge must be 25-50 % (one edge at a time makes each client reconnect "
                f"~1.6 times per rollout and overloads the last old edges), not {strategy.get('maxSurge')!r}")
    if name not in DEV_OVERLAYS:
        check_connections_metric(name, config, hpa)
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
    if secret_ref(cc.get("env", []), "SKUA_ADMIN_KEY") is None:
        problem(f"{name}: skua-control must read SKUA_ADMIN_KEY from Secret {ADMIN_SECRET}")
    cneeded = drain_budget(config, 0)
    if cpod.get("terminationGracePeriodSeconds", 30) < cneeded:
        problem(f"{name}: skua-control terminationGracePeriodSeconds < drain + spread + grace + flush = {cneeded:g}")
    check_pod_hygiene(f"{name} skua-control", cpod)

    # Credentials: the admin key reaches the control plane only; the schema owner's credential
    # reaches the migrate init containers only; the nodes' store user is the DML-only one.
    for dep, dpod in (("skua-edge", pod), ("skua-control", cpod)):
        inits = [x for x in dpod.get("initContainers", []) if x.get("args") == ["migrate"]]
        if len(inits) != 1:
            problem(f"{name}: {dep} must run `skua migrate` in an init container (ordering before the node starts)")
        else:
            ref = secret_ref(inits[0].get("env", []), "SKUA_STORE")
            if ref is None or ref[0] != MIGRATOR_SECRET:
                problem(f"{name}: {dep}'s migrate init container must read SKUA_STORE from Secret {MIGRATOR_SECRET}")
        for x in dpod.get("containers", []):
            used = secret_names_used(x)
            if MIGRATOR_SECRET in used:
                problem(f"{name}: {dep} container {x['name']} must not read {MIGRATOR_SECRET} (the DDL credential)")
            ref = secret_ref(x.get("env", []), "SKUA_STORE")
            if x["name"] == "skua" and (ref is None or ref[0] != NODE_SECRET):
                problem(f"{name}: {dep} must read SKUA_STORE (the DML-only user) from Secret {NODE_SECRET}")
        for x in dpod.get("initContainers", []) + dpod.get("containers", []):
            if dep == "skua-edge" and (ADMIN_SECRET in secret_names_used(x) or "SKUA_ADMIN_KEY" in container_env(x)):
                problem(f"{name}: skua-edge container {x['name']} must not get the admin key")
    check_reloader(name, edge, control)
    if any(d["kind"] in ("Job", "CronJob") and "migrate" in d["metadata"]["name"] for d in docs):
        problem(f"{name}: migrations run in init containers, not in a Job (a Job's template is immutable)")
    if len(problems) == before:
        ok(f"{name}: rollout checks (probes, drain timing, HPA without replicas, PDB, resources, credentials, security)")


RELOADER = "secret.reloader.stakater.com/reload"


def check_reloader(name, *deployments):
    """With Reloader's annotation, a Deployment rolls when a listed Secret changes. Secrets read
    as environment variables must be listed (pods see new values only when they restart);
    Secrets mounted as files must not be: Skua reads them again (the listeners' pair every
    tls_reload_interval, the backends' CA and client pair at every reconnection), so listing
    them would roll the whole fleet on every certificate renewal (issue 32, item 7)."""
    for d in deployments:
        listed = d["metadata"].get("annotations", {}).get(RELOADER)
        if listed is None:
            continue
        listed = {s.strip() for s in listed.split(",") if s.strip()}
        pod = d["spec"]["template"]["spec"]
        mounted = {generated_name(v["secret"]["secretName"], "Secret") for v in pod.get("volumes", []) if "secret" in v}
        env = set()
        for c in pod.get("containers", []):
            env |= secret_names_used(c)
        dep = d["metadata"]["name"]
        for secret in sorted((listed & mounted) - env):
            problem(f"{name}: {dep}'s {RELOADER} lists {secret}, which is mounted as files that Skua reads again: "
                    "a certificate renewal would roll the whole fleet")
        for secret in sorted(env - listed):
            problem(f"{name}: {dep}'s {RELOADER} must list {secret} (read as environment variables: a change "
                    "reaches the pods only when they restart)")


# Values that are placeholders or development credentials: none may reach a production overlay.
PLACEHOLDER = re.compile(
    r"change[-_ ]?me|replace[-_ ]?me|fill[-_ ]?me|<password>|<secret>|changeit|\bTODO\b|\bFIXME\b|skua-dev-|dev-token-",
    re.IGNORECASE,
)


def strings_in(obj, path=""):
    """(path, text) of every string in a resource, Secret data decoded."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from strings_in(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from strings_in(v, f"{path}[{i}]")
    elif isinstance(obj, str):
        yield path, obj


def check_no_placeholders(name, docs):
    before = len(problems)
    for d in docs:
        where = f"{d['kind']} {d['metadata']['name']}"
        texts = list(strings_in(d))
        if d["kind"] == "Secret":
            texts += [(f"data.{k} (decoded)", v) for k, v in secret_values(d).items()]
        for path, text in texts:
            m = PLACEHOLDER.search(text)
            if m:
                problem(f"{name}: {where} {path}: placeholder or development value {m.group(0)!r} in a production overlay")
    if len(problems) == before:
        ok(f"{name}: no placeholder or development value (CHANGE-ME, skua-dev-…, dev tokens)")


# An image reference a rollout can repeat: a digest, or a tag naming one full release
# (major.minor.patch, optionally with a suffix such as -bookworm), never `latest`, a bare major or
# no tag at all (issue 32, item 8).
PINNED_IMAGE = re.compile(r"@sha256:[0-9a-f]{64}$|:v?[0-9]+\.[0-9]+\.[0-9]+([-+._][A-Za-z0-9._-]+)?$")


def pod_images(obj, path=""):
    """(path, image) of every container and init container under `obj`."""
    if isinstance(obj, dict):
        for key in ("containers", "initContainers"):
            for i, c in enumerate(obj.get(key) or []):
                if isinstance(c, dict) and "image" in c:
                    yield f"{path}.{key}[{i}]", c["image"]
        for k, v in obj.items():
            yield from pod_images(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from pod_images(v, f"{path}[{i}]")


def check_pinned_images(name, docs):
    before = len(problems)
    seen = set()
    for d in docs:
        where = f"{d['kind']} {d['metadata']['name']}"
        for path, image in pod_images(d.get("spec", {}), "spec"):
            if not PINNED_IMAGE.search(image or ""):
                problem(f"{name}: {where} {path}: image {image!r} is not pinned (a digest, or a full "
                        "major.minor.patch tag; set the overlay's images: newTag or digest)")
            seen.add(image)
    if len(problems) == before:
        ok(f"{name}: every image pinned to a release or digest ({len(seen)} images)")


# --------------------------------------------------------------------------------------------
# NetworkPolicies


def policy_ports(rules):
    return {p.get("port") for r in rules for p in r.get("ports", [])} | ({"*"} if any("ports" not in r for r in rules) else set())


def check_network_policies(name, docs):
    """A default deny for the namespace (ingress and egress), and explicit allows: clients to the
    edges' http port, gRPC to the control plane, DNS for every pod, the backends' ports for
    Skua's pods, and an ingress rule for every other workload's ports."""
    before = len(problems)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    deny = [
        p for p in policies
        if p["spec"].get("podSelector") == {} and set(p["spec"].get("policyTypes", [])) == {"Ingress", "Egress"}
        and not p["spec"].get("ingress") and not p["spec"].get("egress")
    ]
    if not deny:
        problem(f"{name}: no default-deny NetworkPolicy (podSelector {{}}, policyTypes Ingress and Egress, no rules)")

    def allowed(labels, direction):
        rules = []
        for p in policies:
            if direction in p["spec"].get("policyTypes", []) and matches(p["spec"].get("podSelector", {}), labels):
                rules += p["spec"].get(direction.lower(), [])
        return policy_ports(rules)

    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]
    for w in workloads:
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        pod = w["spec"]["template"]["spec"]
        wname = w["metadata"]["name"]
        if 53 not in allowed(labels, "Egress") and "*" not in allowed(labels, "Egress"):
            problem(f"{name}: {w['kind']} {wname}: no NetworkPolicy allows DNS (egress port 53)")
        # The ports a Service sends traffic to (probes come from the kubelet on the node).
        served = {
            sp.get("targetPort", sp["port"])
            for svc in docs
            if svc["kind"] == "Service" and svc["spec"].get("selector") and matches({"matchLabels": svc["spec"]["selector"]}, labels)
            for sp in svc["spec"].get("ports", [])
        }
        ports = [p for c in pod.get("containers", []) for p in c.get("ports", []) if {p.get("name"), p["containerPort"]} & served]
        ingress = allowed(labels, "Ingress")
        for p in ports:
            if p.get("name") not in ingress and p["containerPort"] not in ingress and "*" not in ingress:
                problem(f"{name}: {w['kind']} {wname}: no NetworkPolicy allows ingress to port {p.get('name') or p['containerPort']}")
        if labels.get("app.kubernetes.io/name") == "skua":
            egress = allowed(labels, "Egress")
            for port, what in ((5432, "Postgres"), (8883, "MQTT over TLS"), (6379, "Redis")):
                if port not in egress and "*" not in egress:
                    problem(f"{name}: {w['kind']} {wname}: no NetworkPolicy allows egress to {what} ({port})")
    check_metadata_egress(name, docs)
    if len(problems) == before:
        ok(f"{name}: default-deny NetworkPolicy and explicit allows for every workload ({len(policies)} policies)")


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
# The MQTT tier (kubernetes/emqx)


def check_mqtt_tier(rendered):
    """EMQX refuses anonymous and plain-text clients, lets the production overlay's cluster user
    reach its own namespace's topics only, and only Skua's namespace reaches the broker."""
    docs = rendered.get("emqx")
    prod = rendered.get("overlays/production")
    if docs is None or prod is None:
        return
    before = len(problems)
    emqx = next((d for d in docs if d["kind"] == "EMQX"), None)
    cm = find(prod, "ConfigMap", "skua-config")
    ns = (cm or {}).get("data", {}).get("SKUA_NAMESPACE", "")
    skua_namespace = find(prod, "Deployment", "skua-edge")["metadata"].get("namespace")
    if emqx is None:
        problem("kubernetes/emqx: the EMQX resource is missing")
        return
    conf = emqx["spec"].get("config", {}).get("data", "")
    flat = re.sub(r"\s+", " ", conf)
    for needle, why in [
        ("listeners.tcp.default.enable = false", "the plain-text MQTT listener must be off"),
        ("listeners.ws.default.enable = false", "the plain-text WebSocket listener must be off"),
        ("verify = verify_peer", "the TLS listener must verify client certificates"),
        ("fail_if_no_peer_cert = true", "the TLS listener must require a client certificate"),
        ("backend = built_in_database", "clients must authenticate (an authenticator makes EMQX refuse anonymous ones)"),
        ("no_match = deny", "authorization must deny what no rule allows"),
    ]:
        if needle not in flat:
            problem(f"kubernetes/emqx: {why} ({needle})")
    rules = re.findall(r"\{(allow|deny),([^.]*)\}\s*\.", conf.replace("\n", " "))
    allows = [body for verdict, body in rules if verdict == "allow"]
    if not rules or rules[-1] != ("deny", " all"):
        problem("kubernetes/emqx: the ACL must end with {deny, all}.")
    for body in allows:
        who = re.match(r"\s*\{username,\s*\"([^\"]+)\"\}", body)
        topics = re.findall(r"\"([^\"]*)\"", body.split("[", 1)[-1]) if "[" in body else []
        if not who or not topics:
            problem(f"kubernetes/emqx: ACL rule {{allow,{body}}} must name a user and its topics")
            continue
        user = who.group(1)
        for t in topics:
            if not (t.startswith(f"{user}/") or t.startswith(f"$share/+/{user}/")):
                problem(f"kubernetes/emqx: user {user} may reach {t!r}, outside its namespace {user}/")
    if ns and not any(re.match(rf"\s*\{{username,\s*\"{re.escape(ns)}\"\}}", b) for b in allows):
        problem(f"kubernetes/emqx: no ACL rule for the production cluster's user {ns!r} (its SKUA_NAMESPACE)")
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    if not any(p["spec"].get("podSelector") == {} and not p["spec"].get("ingress") for p in policies):
        problem("kubernetes/emqx: no default-deny NetworkPolicy in the broker's namespace")
    mqtt_from = [
        f for p in policies for r in p["spec"].get("ingress", [])
        if any(x.get("port") == 8883 for x in r.get("ports", [])) for f in r.get("from", [{}])
    ]
    if not mqtt_from or any(
        f.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") != skua_namespace
        for f in mqtt_from
    ):
        problem(f"kubernetes/emqx: only the {skua_namespace} namespace may reach MQTT (8883)")
    # Issue 32, item 6: the broker is not stateless. Its core nodes keep the built-in
    # database (the cluster's MQTT user): a volume each, resources, a disruption budget.
    core = emqx["spec"].get("coreTemplate", {}).get("spec", {})
    if not core.get("volumeClaimTemplates", {}).get("resources", {}).get("requests", {}).get("storage"):
        problem("kubernetes/emqx: core nodes need volumeClaimTemplates (a full restart would lose the MQTT users)")
    res = core.get("resources", {})
    if not res.get("requests", {}).get("memory") or res.get("requests", {}).get("memory") != res.get("limits", {}).get("memory"):
        problem("kubernetes/emqx: core nodes need resources with the memory request equal to the limit")
    labels = {"apps.emqx.io/instance": emqx["metadata"]["name"]}
    if not any(d["kind"] == "PodDisruptionBudget" and matches(d["spec"].get("selector", {}), labels) for d in docs):
        problem("kubernetes/emqx: no PodDisruptionBudget selects the EMQX pods")
    if len(problems) == before:
        ok(f"kubernetes/emqx: TLS with client certificates, authentication, ACL confined to {ns}/, "
           f"deny by default; 8883 from namespace {skua_namespace} only")


def mqtt_selftest(rendered):
    """check_mqtt_tier must refuse an open broker."""
    if "emqx" not in rendered:
        return

    def broken(edit):
        docs = copy.deepcopy(rendered["emqx"])
        emqx = next(d for d in docs if d["kind"] == "EMQX")
        emqx["spec"]["config"]["data"] = edit(emqx["spec"]["config"]["data"])
        return {**rendered, "emqx": docs}

    def reshaped(edit):
        docs = copy.deepcopy(rendered["emqx"])
        edit(docs)
        return {**rendered, "emqx": docs}

    cases = [
        ("anonymous MQTT clients", broken(lambda c: c.replace("backend = built_in_database", ""))),
        ("an ACL that allows everything", broken(lambda c: c.replace("{deny, all}.", "{allow, all}."))),
        ("a cluster user reaching another namespace", broken(lambda c: c.replace('"skua-prod/#"', '"#"'))),
        ("the plain-text listener on", broken(lambda c: c.replace("listeners.tcp.default.enable = false", ""))),
        ("core nodes without volumes", reshaped(lambda d: next(x for x in d if x["kind"] == "EMQX")["spec"]["coreTemplate"]
                                                 ["spec"].pop("volumeClaimTemplates"))),
        ("no PodDisruptionBudget for the broker",
         reshaped(lambda d: d.remove(next(x for x in d if x["kind"] == "PodDisruptionBudget")))),
    ]
    if all([caught(label, lambda r=r: check_mqtt_tier(r)) for label, r in cases]):
        ok(f"self-test: {len(cases)} ways of opening the broker are each refused")


# --------------------------------------------------------------------------------------------
# Monitoring: alert rules, PodMonitor, Grafana dashboard

MONITORING = os.path.join(HERE, "monitoring")
# Series that other exporters provide: Prometheus' own `up`, and kube-state-metrics' HPA state.
EXTERNAL_METRICS = {
    "up",
    "kube_horizontalpodautoscaler_status_current_replicas",
    "kube_horizontalpodautoscaler_spec_max_replicas",
    # Memory against the limit and OOM kills: cAdvisor (kubelet) and kube-state-metrics.
    "container_memory_working_set_bytes",
    "kube_pod_container_resource_limits",
    "kube_pod_container_status_restarts_total",
    "kube_pod_container_status_last_terminated_reason",
    # The wss:// probe and certificate expiry: the blackbox exporter (monitoring/probe.yaml).
    "probe_success",
    "probe_ssl_earliest_cert_expiry",
}
SEVERITIES = {"critical", "warning", "info"}


def registered_metrics():
    """The metric names skua exposes: every "skua_…"/"process_…" string literal in the crates'
    sources (not tests), every name in a `# TYPE` line written out as text (the server's own
    series), and `_bucket`, `_sum`, `_count` of those declared as histograms."""
    names, histograms = set(), set()
    for path in glob.glob(os.path.join(ROOT, "crates", "*", "src", "**", "*.rs"), recursive=True):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r'"((?:skua|process)_[a-z0-9_]+)"', text):
            names.add(m.group(1))
        for m in re.finditer(r"# TYPE ((?:skua|process)_[a-z0-9_]+) ([a-z]+)", text):
            names.add(m.group(1))
            if m.group(2) == "histogram":
                histograms.add(m.group(1))
        for m in re.finditer(r'"histogram"', text):
            before = re.findall(r'"((?:skua|process)_[a-z0-9_]+)"', text[max(0, m.start() - 300) : m.start()])
            if before:
                histograms.add(before[-1])
    for h in histograms:
        names |= {f"{h}_bucket", f"{h}_sum", f"{h}_count"}
    return {n for n in names if not n.startswith("skua_test_")}


def check_expr(where, expr, used):
    try:
        for metric in promql.parse(expr):
            used.setdefault(metric, where)
    except promql.PromQLError as e:
        problem(f"{where}: PromQL does not parse: {e}: {expr}")


def braces_balanced(text):
    return text.count("{{") == text.count("}}")


def check_rules(used):
    path = os.path.join(MONITORING, "skua-alerts.yaml")
    with open(path, encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    before = len(problems)
    if not isinstance(rules, dict) or set(rules) != {"groups"} or not isinstance(rules["groups"], list):
        problem("monitoring/skua-alerts.yaml: must be a rule file: a mapping with one key, groups (a list)")
        return rules
    groups, alerts, count = set(), set(), 0
    for g in rules["groups"]:
        gname = g.get("name")
        if not gname or gname in groups:
            problem(f"monitoring/skua-alerts.yaml: group names must be present and unique ({gname!r})")
        groups.add(gname)
        if set(g) - {"name", "rules", "interval", "limit"} or not isinstance(g.get("rules"), list) or not g["rules"]:
            problem(f"monitoring/skua-alerts.yaml: group {gname}: keys name, rules (non-empty), interval, limit only")
            continue
        for r in g["rules"]:
            count += 1
            kind = "alert" if "alert" in r else "record" if "record" in r else None
            where = f"monitoring/skua-alerts.yaml {gname}/{r.get(kind or 'alert', '?')}"
            allowed = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"} if kind == "alert" else {
                "record", "expr", "labels"}
            if kind is None or ("alert" in r and "record" in r) or set(r) - allowed:
                problem(f"{where}: a rule is an alert (alert, expr, for, labels, annotations) or a record rule")
                continue
            if not isinstance(r.get("expr"), str):
                problem(f"{where}: expr must be a string")
                continue
            check_expr(where, r["expr"], used)
            for key in ("for", "keep_firing_for"):
                if key in r and not promql.DURATION.fullmatch(str(r[key])):
                    problem(f"{where}: {key} {r[key]!r} is not a duration")
            if kind == "alert":
                if r["alert"] in alerts or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", r["alert"]):
                    problem(f"{where}: alert names must be unique identifiers")
                alerts.add(r["alert"])
                if r.get("labels", {}).get("severity") not in SEVERITIES:
                    problem(f"{where}: labels.severity must be one of {sorted(SEVERITIES)}")
                ann = r.get("annotations", {})
                if not ann.get("summary") or not ann.get("description"):
                    problem(f"{where}: annotations need a summary and a description")
                for k, v in {**ann, **r.get("labels", {})}.items():
                    if not isinstance(v, str) or not braces_balanced(v):
                        problem(f"{where}: {k} must be a string with balanced {{{{ }}}} templates")
    if len(problems) == before:
        ok(f"monitoring/skua-alerts.yaml: {count} rules in {len(groups)} groups parse (PromQL, durations, labels, annotations)")
    return rules


def check_prometheus_rule(rules, docs):
    sys.path.insert(0, MONITORING)
    import importlib

    sync = importlib.import_module("sync-rules")
    with open(os.path.join(MONITORING, "prometheusrule.yaml"), encoding="utf-8") as f:
        text = f.read()
    pr = find(docs, "PrometheusRule", "skua")
    if pr is None or pr.get("spec") != rules or text != sync.render():
        problem("monitoring/prometheusrule.yaml differs from skua-alerts.yaml: run python3 deploy/monitoring/sync-rules.py")
    else:
        ok("monitoring/prometheusrule.yaml: the same rules as skua-alerts.yaml")


def check_pod_monitor(docs, rendered):
    before = len(problems)
    pm = find(docs, "PodMonitor", "skua")
    if pm is None:
        problem("monitoring: PodMonitor skua is missing")
        return
    endpoints = pm["spec"].get("podMetricsEndpoints", [])
    ports = {e.get("port") for e in endpoints}
    for name, rdocs in rendered.items():
        if not name.startswith("overlays/"):
            continue
        cm = find(rdocs, "ConfigMap", "skua-config")
        listen = (cm or {}).get("data", {}).get("SKUA_METRICS_LISTEN", "")
        for dep in ("skua-edge", "skua-control"):
            d = find(rdocs, "Deployment", dep)
            if d is None:
                continue
            labels = d["spec"]["template"]["metadata"]["labels"]
            if not matches(pm["spec"].get("selector", {}), labels):
                problem(f"monitoring: PodMonitor skua does not select {name} {dep}")
            cports = {p.get("name"): p["containerPort"] for c in d["spec"]["template"]["spec"]["containers"]
                      for p in c.get("ports", [])}
            for port in ports:
                if port not in cports:
                    problem(f"monitoring: PodMonitor port {port!r} is not a port of {name} {dep}")
                elif not listen.endswith(f":{cports[port]}"):
                    problem(f"monitoring: {name} SKUA_METRICS_LISTEN {listen!r} is not the PodMonitor's port {cports[port]}")
    relabels = [r for e in endpoints for r in e.get("relabelings", [])]
    if pm["spec"].get("jobLabel") != "app.kubernetes.io/name" or not any(r.get("targetLabel") == "component" for r in relabels):
        problem("monitoring: PodMonitor must set job (jobLabel app.kubernetes.io/name) and component, which the rules use")
    if len(problems) == before:
        ok("monitoring/podmonitor.yaml: selects the edges and the control plane on their metrics port")


def check_emqx_scrape(docs, rendered):
    """The broker is scraped (issue 32, item 6): a PodMonitor selects the EMQX pods in their
    namespace, and the broker's NetworkPolicy admits the monitoring namespace on its port."""
    emqx_docs = rendered.get("emqx", [])
    emqx = next((d for d in emqx_docs if d["kind"] == "EMQX"), None)
    if emqx is None:
        return
    ns = emqx["metadata"].get("namespace")
    labels = {"apps.emqx.io/instance": emqx["metadata"]["name"]}
    pms = [d for d in docs if d["kind"] == "PodMonitor" and matches(d["spec"].get("selector", {}), labels)
           and ns in d["spec"].get("namespaceSelector", {}).get("matchNames", [])]
    if not pms:
        problem(f"monitoring: no PodMonitor scrapes the EMQX pods in namespace {ns}")
        return
    ports = {e.get("targetPort") or e.get("portNumber") for e in pms[0]["spec"].get("podMetricsEndpoints", [])}
    admitted = {p.get("port") for pol in emqx_docs if pol["kind"] == "NetworkPolicy" for r in pol["spec"].get("ingress", [])
                if any(f.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") == "monitoring"
                       for f in r.get("from", [])) for p in r.get("ports", [])}
    if not ports & admitted:
        problem(f"kubernetes/emqx: no NetworkPolicy admits the monitoring namespace on the scraped port {sorted(ports)}")
    else:
        ok(f"monitoring/emqx-podmonitor.yaml: scrapes EMQX in {ns} on {sorted(ports)}, admitted by its NetworkPolicy")


def check_dashboard(used):
    path = os.path.join(MONITORING, "skua-dashboard.json")
    before = len(problems)
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
    except ValueError as e:
        problem(f"monitoring/skua-dashboard.json: not JSON: {e}")
        return
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        if key not in dash:
            problem(f"monitoring/skua-dashboard.json: {key} is missing")
    variables = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        problem("monitoring/skua-dashboard.json: needs a datasource variable (no data source uid is hard-coded)")
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)\s*", q or "")
        if v.get("type") == "query":
            if not m:
                problem(f"monitoring/skua-dashboard.json: variable {v.get('name')}: expected label_values(selector, label)")
            else:
                check_expr(f"monitoring/skua-dashboard.json variable {v['name']}", m.group(1), used)
    ids, targets = set(), 0
    for p in dash.get("panels", []):
        where = f"monitoring/skua-dashboard.json panel {p.get('id')} {p.get('title')!r}"
        if p.get("id") in ids:
            problem(f"{where}: panel ids must be unique")
        ids.add(p.get("id"))
        gp = p.get("gridPos", {})
        if not all(isinstance(gp.get(k), int) for k in ("h", "w", "x", "y")) or gp["x"] + gp["w"] > 24:
            problem(f"{where}: gridPos needs integer h, w, x, y within 24 columns")
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problem(f"{where}: datasource must be the ${{datasource}} variable")
        if not p.get("targets"):
            problem(f"{where}: no query")
        for t in p.get("targets", []):
            targets += 1
            check_expr(f"{where} {t.get('refId')}", t.get("expr", ""), used)
            for var in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", t.get("expr", "")):
                if var not in variables and not var.startswith("__"):
                    problem(f"{where}: ${var} is not a dashboard variable")
    if len(problems) == before:
        ok(f"monitoring/skua-dashboard.json: {len(ids)} panels, {targets} queries parse, variables defined")


def check_monitoring(rendered):
    print("== Monitoring (deploy/monitoring)")
    try:
        docs = kustomize.build(MONITORING)
        ok(f"monitoring: rendered {len(docs)} resources")
    except kustomize.KustomizeError as e:
        problem(f"monitoring: {e}")
        return
    kubectl = shutil.which("kubectl")
    if not kubectl:
        skipped("kubectl not installed: deploy/monitoring was not compared with `kubectl kustomize`")
    else:
        r = run([kubectl, "kustomize", MONITORING])
        theirs = canonical(d for d in yaml.safe_load_all(r.stdout) if d) if r.returncode == 0 else None
        if theirs != canonical(docs):
            problem(f"monitoring: differs from kubectl kustomize {r.stderr.strip()}")
        else:
            ok("monitoring: identical to kubectl kustomize")
    used = {}
    rules = check_rules(used)
    check_promtool()
    check_prometheus_rule(rules, docs)
    check_pod_monitor(docs, rendered)
    check_emqx_scrape(docs, rendered)
    check_dashboard(used)
    registered = registered_metrics()
    if check_metrics_exist(used, registered):
        ok(f"monitoring: all {len(used)} metrics the rules and the dashboard name exist "
           f"({len(set(used) & EXTERNAL_METRICS)} external)")
    # The checks must refuse what they guard against.
    cases = [
        ("a misspelled metric", lambda: check_metrics_exist({"skua_conections_open": "self-test"}, registered)),
        ("rate() of an instant vector", lambda: check_expr("self-test", "rate(skua_ready)", {})),
        ("unbalanced parentheses", lambda: check_expr("self-test", "sum(rate(skua_ready[5m])", {})),
        ("an unknown function", lambda: check_expr("self-test", "rates(skua_ready[5m])", {})),
        ("an unquoted label value", lambda: check_expr("self-test", "skua_ready{slot=bus}", {})),
    ]
    if all([caught(label, check) for label, check in cases]):
        ok(f"monitoring self-test: {len(cases)} broken queries are each refused")
    if shutil.which("promtool"):
        broken_rules = [
            ("a no-ready-edge alert that is silent when every edge is gone",
             "expr: sum by (namespace) (skua_ready{component=\"edge\"}) == 0 or absent(skua_ready{component=\"edge\"})",
             "expr: count by (namespace) (skua_ready{component=\"edge\"} == 1) < 1"),
            ("a drain alert that cannot fire before the kubelet's kill",
             "expr: max by (namespace, pod) (max_over_time(skua_drain_seconds[2m])) > 30",
             "expr: skua_draining == 1\n        for: 5m"),
            ("SkuaTargetDown as a warning", "severity: critical\n        annotations:\n          summary: \"Prometheus cannot",
             "severity: warning\n        annotations:\n          summary: \"Prometheus cannot"),
        ]
        passed = 0
        for label, old_text, new_text in broken_rules:
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(MONITORING, "skua-alerts.yaml"), encoding="utf-8") as f:
                    text = f.read()
                if old_text not in text:
                    problem(f"self-test: {label}: the rule text to break is not in skua-alerts.yaml")
                    continue
                with open(os.path.join(tmp, "skua-alerts.yaml"), "w", encoding="utf-8") as f:
                    f.write(text.replace(old_text, new_text))
                shutil.copy(os.path.join(MONITORING, "skua-alerts.test.yaml"), tmp)
                passed += caught(label, lambda t=tmp: check_promtool(t))
        if passed == len(broken_rules):
            ok(f"monitoring self-test: {len(broken_rules)} broken alert rules each fail promtool's unit tests")


# Alerts that must exist (issue 32, item 4): removing one, or making it unable to fire, fails
# the promtool unit tests too (monitoring/skua-alerts.test.yaml).
REQUIRED_ALERTS = {
    "SkuaNoReadyEdge": "critical",
    "SkuaTargetDown": "critical",
    "SkuaDrainStuck": "warning",
    "SkuaMemoryNearLimit": "warning",
    "SkuaOOMKilled": "critical",
    "SkuaCertificateExpiring": "critical",
    "SkuaCertificateFileExpiresSoon": "warning",
    "SkuaCertificateFileExpiring": "critical",
}


def check_promtool(directory=None):
    """`promtool check rules` and `promtool test rules` on the rule file and its unit tests.
    Without promtool the check is skipped loudly, and fails under CI=true (install it with
    `apt-get install prometheus`, Debian's package carries it)."""
    promtool = shutil.which("promtool")
    directory = directory or MONITORING
    rules = os.path.join(directory, "skua-alerts.yaml")
    tests = os.path.join(directory, "skua-alerts.test.yaml")
    with open(rules, encoding="utf-8") as f:
        alerts = {r["alert"]: r.get("labels", {}).get("severity") for g in yaml.safe_load(f)["groups"]
                  for r in g["rules"] if "alert" in r}
    for alert, severity in REQUIRED_ALERTS.items():
        if alerts.get(alert) != severity:
            problem(f"monitoring/skua-alerts.yaml: alert {alert} with severity {severity} is required "
                    f"(has {alerts.get(alert)!r})")
    with open(tests, encoding="utf-8") as f:
        tested = {a.get("alertname") for t in yaml.safe_load(f).get("tests", []) for a in t.get("alert_rule_test", [])}
    for alert in sorted(set(REQUIRED_ALERTS) - tested):
        problem(f"monitoring/skua-alerts.test.yaml: no unit test for {alert}")
    if not promtool:
        skipped("promtool not installed: the alert rules' unit tests did not run (apt-get install prometheus)")
        return
    r = run([promtool, "check", "rules", rules])
    if r.returncode != 0:
        problem(f"monitoring/skua-alerts.yaml: promtool check rules:\n{r.stdout}{r.stderr}")
    r = run([promtool, "test", "rules", os.path.basename(tests)], cwd=directory)
    if r.returncode != 0:
        problem(f"monitoring/skua-alerts.test.yaml: promtool test rules:\n{r.stdout}{r.stderr}")
    else:
        ok(f"monitoring/skua-alerts.test.yaml: promtool test rules passes ({len(tested)} alerts tested, "
           "all edges down included)")


def check_metrics_exist(used, registered):
    before = len(problems)
    for metric, where in sorted(used.items()):
        if metric not in registered | EXTERNAL_METRICS:
            problem(f"{where}: metric {metric} is not one skua exposes (crates/*/src) nor a listed external one")
    return len(problems) == before


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
    # deploy/compose/cluster.yml copies edge-1 as edge-3 (YAML anchors do not cross files): the
    # copy must not drift (issue 32, item 11: it had lost SKUA_CLUSTER).
    with open(os.path.join(HERE, "compose", "cluster.yml"), encoding="utf-8") as f:
        cluster = yaml.safe_load(f)
    e1 = dict(services.get("edge-1", {}).get("environment", {}))
    e3 = dict(cluster.get("services", {}).get("edge-3", {}).get("environment", {}))
    e1.pop("SKUA_NODE_ID", None)
    e3.pop("SKUA_NODE_ID", None)
    if e1 != e3:
        diff = sorted(k for k in set(e1) | set(e3) if e1.get(k) != e3.get(k))
        problem(f"deploy/compose/cluster.yml: edge-3's environment differs from edge-1's in {diff}")
    if services.get("control", {}).get("environment", {}).get("SKUA_GRPC_LISTEN") != "0.0.0.0:50051":
        problem("docker-compose.yml: control must listen for gRPC on 0.0.0.0:50051")
    if len(problems) == before:
        ok("docker-compose.yml: cluster shape (2 edges, control, health-checked deps, pki and migrate first)")
    return compose


def check_readme_references():
    """Every `deploy/README.md "Section"` (or `README "Section"`) named in the repository's
    deployment files, scripts and docs is a heading of that file (issue 32, item 11: three
    pointed at sections that did not exist)."""
    headings = {}
    for readme, key in ((os.path.join(HERE, "README.md"), "deploy/README.md"), (os.path.join(ROOT, "README.md"), "README")):
        with open(readme, encoding="utf-8") as f:
            headings[key] = [ln.lstrip("#").strip() for ln in f if ln.startswith("#")]
    files = [os.path.join(ROOT, p) for p in ("Dockerfile", "docker-compose.yml", "README.md")]
    for pattern in ("*.sh", "*.py", "*.md", "compose/*", "kubernetes/**/*.yaml", "monitoring/*"):
        files += glob.glob(os.path.join(HERE, pattern), recursive=True)
    files += glob.glob(os.path.join(ROOT, "docs", "*.md"))
    before, count = len(problems), 0
    for path in sorted(set(files)):
        if not os.path.isfile(path) or ".venv" in path or path == os.path.abspath(__file__):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            # Comments wrap: a reference may span lines (with the comment marker between).
            text = re.sub(r"\s*\n\s*(#\s*)?", " ", f.read())
        for m in re.finditer(r'(deploy/README\.md|\bREADME)(?:,|\'s)? \(?"([^"]{3,80})"', text):
            key = "deploy/README.md" if m.group(1).startswith("deploy") else "README"
            if key == "README" and os.path.basename(path) == "README.md" and os.path.dirname(path) == HERE:
                continue
            count += 1
            if not any(h.startswith(m.group(2)) for h in headings[key]):
                problem(f"{os.path.relpath(path, ROOT)}: {key} has no section \"{m.group(2)}\"")
    if len(problems) == before:
        ok(f"{count} references to README sections name existing headings")


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
    # The runtime stages: everything after the build stage (runtime-base, the prebuilt target
    # and the default runtime target, last).
    runtime = lines[stages[1] :]
    names = [ln.split()[-1] for ln in (lines[i] for i in stages) if " AS " in ln.upper()]
    if "prebuilt" not in names or names[-1] == "prebuilt":
        problem("Dockerfile: a `prebuilt` target (a binary built beforehand, for CI's compose run) is required, "
                "and the default (last) target must build from source")
    if not lines[stages[-1]].upper().startswith("FROM RUNTIME-BASE") or not any(
            ln.startswith("COPY --from=build ") for ln in lines[stages[-1]:]):
        problem("Dockerfile: the last (default) target must be runtime-base plus the binary of the build stage")
    users = [ln.split()[1] for ln in runtime if ln.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problem("Dockerfile: the runtime stage must switch to a non-root user")
    if any("cargo" in ln or "rustc" in ln for ln in runtime):
        problem("Dockerfile: the runtime stage must not carry build tools")
    if "rust" in runtime[0]:
        problem("Dockerfile: the runtime stage must not be based on a Rust image")
    build = lines[stages[0]:stages[1]]
    if not any(re.fullmatch(r"ARG SKUA_GIT_SHA(=.*)?", ln) for ln in build):
        problem("Dockerfile: the build stage must take ARG SKUA_GIT_SHA (skua_build_info's git_sha is read at build time)")
    health = " ".join(ln for ln in runtime if ln.upper().startswith("HEALTHCHECK") or ln.startswith("CMD ["))
    if "HEALTHCHECK" not in health.upper() or "SKUA_TLS_CERT" not in health:
        problem("Dockerfile: the HEALTHCHECK must work with TLS on (SKUA_TLS_CERT): plain HTTP to a TLS listener fails")
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
    # Generators: names and Secret encoding as kubectl kustomize (v5.5) rendered them.
    k = {
        "configMapGenerator": [{"name": "cfg", "literals": ["A=x&y<z>", 'B="2"', "C="]}],
        "secretGenerator": [{"name": "sec", "literals": ["S=hello", "T=postgres://a:b@c/d?sslmode=verify-full&x=y", "L=" + "x" * 52]}],
    }
    made = kustomize.generate("selftest", k)
    kustomize.add_hash_suffixes(made, {("ConfigMap", "cfg"), ("Secret", "sec")})
    names = [d["metadata"]["name"] for d in made]
    long_value = made[1]["data"]["L"]
    if names != ["cfg-54kb9b46kb", "sec-dmbd9d44d7"] or long_value != "eHh4" * 17 + "eA\n==\n" or made[0]["data"]["B"] != "2":
        problem(f"kustomize.py generators: got {names} and {long_value!r}, not kustomize's")
    else:
        ok("kustomize.py: generated names carry kustomize's content hash; Secret values encoded as kustomize does")


def caught(label, check):
    """Runs `check` (quietly) and tells whether it reported a problem; its problems are not kept."""
    saved = list(problems)
    with contextlib.redirect_stdout(io.StringIO()):
        check()
    found = len(problems) > len(saved)
    problems[:] = saved
    if not found:
        problem(f"self-test: a reintroduced mistake passed the checks: {label}")
    return found


def mutation_selftest(rendered, known):
    """Each rule must fail on the mistake it guards against: the production rendering, broken
    one way at a time, must be refused."""
    name = "overlays/production"
    base = rendered.get(name)
    if base is None:
        return

    def mutated(edit):
        docs = copy.deepcopy(base)
        edit(docs)
        return docs

    def edge_pod(docs):
        return find(docs, "Deployment", "skua-edge")["spec"]["template"]["spec"]

    def skua(pod):
        return next(c for c in pod["containers"] if c["name"] == "skua")

    def add_secret(docs, value):
        docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "skua-admin-key", "namespace": "skua"},
                     "type": "Opaque", "stringData": {"SKUA_ADMIN_KEY": value}})

    def svc_ann(docs):
        return find(docs, "Service", "skua-edge")["metadata"]["annotations"]

    def set_tg(docs, key, value):
        attrs = target_group_attributes(find(docs, "Service", "skua-edge"))
        if value is None:
            attrs.pop(key, None)
        else:
            attrs[key] = value
        svc_ann(docs)[AWS + "target-group-attributes"] = ",".join(f"{k}={v}" for k, v in attrs.items())

    cases = [
        ("replicas on the HPA-managed edge Deployment",
         lambda d: find(d, "Deployment", "skua-edge")["spec"].__setitem__("replicas", 3), check_rollout),
        ("an HPA on CPU only",
         lambda d: find(d, "HorizontalPodAutoscaler", "skua-edge")["spec"].__setitem__(
             "metrics", find(d, "HorizontalPodAutoscaler", "skua-edge")["spec"]["metrics"][:1]), check_rollout),
        ("an edge memory request below its limit",
         lambda d: skua(edge_pod(d))["resources"]["requests"].__setitem__("memory", "1Gi"), check_rollout),
        ("a preStop shorter than the load balancer's health check",
         lambda d: skua(edge_pod(d))["lifecycle"]["preStop"]["exec"].__setitem__("command", ["/bin/sleep", "5"]),
         check_rollout),
        ("NLB instance targets", lambda d: svc_ann(d).__setitem__(AWS + "nlb-target-type", "instance"), check_rollout),
        ("the in-tree NLB controller",
         lambda d: find(d, "Service", "skua-edge")["spec"].pop("loadBalancerClass"), check_rollout),
        ("no pod readiness gates",
         lambda d: find(d, "Namespace", "skua")["metadata"].pop("labels"), check_rollout),
        ("a deregistration delay shorter than the drain",
         lambda d: set_tg(d, "deregistration_delay.timeout_seconds", "30"), check_rollout),
        ("connections reset on unhealthy targets",
         lambda d: set_tg(d, "target_health_state.unhealthy.connection_termination.enabled", None), check_rollout),
        ("connections reset at the end of the deregistration delay",
         lambda d: set_tg(d, "deregistration_delay.connection_termination.enabled", "true"), check_rollout),
        ("a health check on /healthz", lambda d: svc_ann(d).__setitem__(AWS + "healthcheck-path", "/healthz"),
         check_rollout),
        ("a plain-HTTP health check of the TLS listener",
         lambda d: svc_ann(d).__setitem__(AWS + "healthcheck-protocol", "HTTP"), check_rollout),
        ("wss:// on port 80 instead of 443",
         lambda d: find(d, "Service", "skua-edge")["spec"]["ports"][0].__setitem__("port", 80), check_rollout),
        ("maxSurge 1 (one edge at a time)",
         lambda d: find(d, "Deployment", "skua-edge")["spec"]["strategy"]["rollingUpdate"].__setitem__("maxSurge", 1),
         check_rollout),
        ("an HPA without the connections metric",
         lambda d: find(d, "HorizontalPodAutoscaler", "skua-edge")["spec"].__setitem__(
             "metrics", [m for m in find(d, "HorizontalPodAutoscaler", "skua-edge")["spec"]["metrics"] if m["type"] != "Pods"]),
         check_rollout),
        ("a connections target at the cap",
         lambda d: next(m for m in find(d, "HorizontalPodAutoscaler", "skua-edge")["spec"]["metrics"]
                        if m["type"] == "Pods")["pods"]["target"].__setitem__("averageValue", "100000"), check_rollout),
        ("no startupProbe on the edges", lambda d: skua(edge_pod(d)).pop("startupProbe"), check_rollout),
        ("a plain-HTTP startupProbe on the TLS listener",
         lambda d: skua(edge_pod(d))["startupProbe"]["httpGet"].pop("scheme"), check_rollout),
        ("zone spread ScheduleAnyway",
         lambda d: next(t for t in edge_pod(d)["topologySpreadConstraints"] if t["topologyKey"].endswith("zone"))
         .__setitem__("whenUnsatisfiable", "ScheduleAnyway"), check_rollout),
        ("no control-plane anti-affinity",
         lambda d: find(d, "Deployment", "skua-control")["spec"]["template"]["spec"].pop("affinity"), check_rollout),
        ("egress to any address on port 80 (the metadata endpoint)",
         lambda d: find(d, "NetworkPolicy", "skua-egress")["spec"]["egress"][0].pop("to"),
         lambda n, docs, k: check_network_policies(n, docs)),
        ("egress that no longer excepts the metadata endpoint",
         lambda d: find(d, "NetworkPolicy", "skua-egress")["spec"]["egress"][0]["to"][0]["ipBlock"].pop("except"),
         lambda n, docs, k: check_network_policies(n, docs)),
        ("a grace period shorter than the drain",
         lambda d: edge_pod(d).__setitem__("terminationGracePeriodSeconds", 30), check_rollout),
        ("no minReadySeconds", lambda d: find(d, "Deployment", "skua-edge")["spec"].pop("minReadySeconds"), check_rollout),
        ("the admin key given to the edges",
         lambda d: skua(edge_pod(d))["env"].append(
             {"name": "SKUA_ADMIN_KEY", "valueFrom": {"secretKeyRef": {"name": ADMIN_SECRET, "key": "SKUA_ADMIN_KEY"}}}),
         check_rollout),
        ("the edges' bus through envFrom only",
         lambda d: skua(edge_pod(d)).__setitem__("env", [e for e in skua(edge_pod(d))["env"] if e["name"] != "SKUA_BUS"]),
         check_rollout),
        ("the nodes on the migrator's (DDL) credential",
         lambda d: next(e for e in skua(edge_pod(d))["env"] if e["name"] == "SKUA_STORE")["valueFrom"]["secretKeyRef"].__setitem__(
             "name", MIGRATOR_SECRET), check_rollout),
        ("no migrate init container", lambda d: edge_pod(d).pop("initContainers"), check_rollout),
        ("Reloader rolling the edges on a backend certificate renewal",
         lambda d: find(d, "Deployment", "skua-edge")["metadata"]["annotations"].__setitem__(
             RELOADER, "skua-secrets,skua-backend-tls"), check_rollout),
        ("Reloader not rolling the control plane on a new admin key",
         lambda d: find(d, "Deployment", "skua-control")["metadata"]["annotations"].__setitem__(
             RELOADER, "skua-secrets"), check_rollout),
        ("a floating image tag in production", lambda d: skua(edge_pod(d)).__setitem__("image", "registry.example.com/skua:latest"),
         lambda n, docs, k: check_pinned_images(n, docs)),
        ("an image with a bare major tag in production",
         lambda d: edge_pod(d)["initContainers"][0].__setitem__("image", "registry.example.com/skua:1"),
         lambda n, docs, k: check_pinned_images(n, docs)),
        ("a placeholder secret in production", lambda d: add_secret(d, "CHANGE-ME-to-a-long-random-key"),
         lambda n, docs, k: check_no_placeholders(n, docs)),
        ("a development credential in production", lambda d: add_secret(d, "skua-dev-admin-key-0123"),
         lambda n, docs, k: check_no_placeholders(n, docs)),
        ("no default-deny NetworkPolicy",
         lambda d: d.remove(find(d, "NetworkPolicy", "default-deny")), lambda n, docs, k: check_network_policies(n, docs)),
        ("no DNS allowed", lambda d: d.remove(find(d, "NetworkPolicy", "dns")),
         lambda n, docs, k: check_network_policies(n, docs)),
        ("no ingress to the control plane's gRPC", lambda d: d.remove(find(d, "NetworkPolicy", "skua-control")),
         lambda n, docs, k: check_network_policies(n, docs)),
    ]
    passed = 0
    for label, edit, check in cases:
        docs = mutated(edit)
        passed += caught(label, lambda: check(name, docs, known))
    if passed == len(cases):
        ok(f"self-test: {len(cases)} reintroduced mistakes are each refused")


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
            check_network_policies(name, rendered[name])
            if name not in DEV_OVERLAYS:
                check_no_placeholders(name, rendered[name])
                check_pinned_images(name, rendered[name])
    mutation_selftest(rendered, known)
    check_mqtt_tier(rendered)
    mqtt_selftest(rendered)
    check_monitoring(rendered)
    print("== docker-compose.yml")
    compose = check_compose(known)
    print("== TLS to the backends")
    check_backend_tls(rendered, compose)
    print("== Dockerfile")
    check_dockerfile()
    print("== README references")
    check_readme_references()
    if problems:
        print(f"deploy validation: {len(problems)} problem(s)")
        return 1
    print("deploy validation: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
