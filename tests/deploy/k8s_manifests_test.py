"""Offline checks of deploy/k8s (the kustomize base), as far as they can go without a cluster:

1. kustomize's part that matters here is re-done (resources list, `labels`, `images`), and `kustomize build` itself
   is run too when a kustomize or kubectl binary is on PATH (not packaged for Debian, so usually skipped).
2. Every built-in object is validated with kubernetes-validate (the Kubernetes OpenAPI schemas, strict: unknown
   fields are errors) for the oldest and newest Kubernetes versions we claim (1.29 and 1.37); the Prometheus
   Operator objects (ServiceMonitor, PodMonitor) against the fields the operator requires.
3. Cross-references a schema cannot see: selectors match pod labels, named ports exist, volumes name existing claims,
   config maps and secrets, the StatefulSet's Service is headless, RBAC subjects exist, monitors select something.
4. The job file in the ConfigMap is loaded by the real `verl-controller --print-config` (our validation), and agrees
   with the cluster: nnodes = worker replicas, n_gpus_per_node = --ranks = GPUs requested, worker_addresses = the
   StatefulSet's stable names on its gRPC port; the real `verl-controller` and `verl-worker` parse their containers'
   args (a flag they reject would crash-loop the pod).

usage: k8s_manifests_test.py BUILD_DIR SOURCE_DIR     (with the python of tools/test_python.sh; exit 77 without it)
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import kubernetes_validate
    import yaml
except ImportError as e:
    print(f"kubernetes-validate not importable ({e}); run tools/test_python.sh. Skipped.")
    sys.exit(77)

K8S_VERSIONS = ["1.29.0", "1.37.0"]
# Secrets the user creates outside the base (docs/kubernetes.md): the TLS certificate.
EXTERNAL_SECRETS = {"verl-tls"}
MONITOR_KINDS = {"ServiceMonitor", "PodMonitor"}

failures = []


def check(cond, msg):
    if cond:
        print("ok: " + msg)
    else:
        print("FAILED: " + msg)
        failures.append(msg)


def load(base):
    kust = yaml.safe_load(open(os.path.join(base, "kustomization.yaml")))
    files = sorted(f for f in os.listdir(base) if f.endswith(".yaml") and f != "kustomization.yaml")
    check(sorted(kust["resources"]) == files, f"kustomization.yaml lists every manifest ({len(files)} files)")
    docs = []
    for f in kust["resources"]:
        for d in yaml.safe_load_all(open(os.path.join(base, f))):
            if d:
                d["__file"] = f
                docs.append(d)
    # kustomize `labels` (without includeSelectors: metadata only) and `images`.
    extra = {}
    for entry in kust.get("labels", []):
        extra.update(entry["pairs"])
    images = {i["name"]: i for i in kust.get("images", [])}
    for d in docs:
        d.setdefault("metadata", {}).setdefault("labels", {}).update(extra)
        for c in containers(d):
            img = images.get(c["image"].split(":")[0])
            if img:
                c["image"] = img.get("newName", c["image"].split(":")[0]) + ":" + img.get("newTag", "latest")
    return kust, docs


def pod_template(d):
    return d.get("spec", {}).get("template") if d["kind"] in ("Deployment", "StatefulSet") else None


def containers(d):
    t = pod_template(d)
    return t["spec"]["containers"] if t else []


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def arg_value(args, flag):
    """The value of `--flag=value` or `--flag value` in a container's args."""
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def daemon_accepts(build, command, args):
    """Runs the real binary on the container's command line with --help last: it parses every flag before it, and
    exits 0 only if each one is known and well-formed (a pod with a flag it rejects would crash-loop)."""
    r = subprocess.run([os.path.join(build, "bin", command[0])] + command[1:] + args + ["--help"],
                       capture_output=True, text=True, timeout=30)
    return r.returncode == 0, (r.stderr or r.stdout)[:300]


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    base = os.path.join(source, "deploy", "k8s")
    kust, docs = load(base)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d

    # 2. Schemas.
    for d in docs:
        name = f'{d["__file"]}: {d["kind"]}/{d["metadata"]["name"]}'
        body = {k: v for k, v in d.items() if k != "__file"}
        if d["kind"] in MONITOR_KINDS:
            spec = d.get("spec", {})
            eps = spec.get("endpoints") if d["kind"] == "ServiceMonitor" else spec.get("podMetricsEndpoints")
            check(d["apiVersion"] == "monitoring.coreos.com/v1" and spec.get("selector", {}).get("matchLabels")
                  and eps and all("port" in e for e in eps), f"{name} has what the Prometheus Operator requires")
            continue
        for v in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(body, v, strict=True)
                ok, err = True, ""
            except Exception as e:  # ValidationError, SchemaNotFoundError, ...
                ok, err = False, str(e)[:500]
            check(ok, f"{name} validates against Kubernetes {v} (strict) {err}")

    # 3. Cross-references.
    workloads = [d for d in docs if pod_template(d)]
    for w in workloads:
        labels = pod_template(w)["metadata"]["labels"]
        check(matches(w["spec"]["selector"]["matchLabels"], labels), f'{w["kind"]}/{w["metadata"]["name"]}: selector matches its pods')
        spec = pod_template(w)["spec"]
        sa = spec.get("serviceAccountName")
        check(sa in by_kind.get("ServiceAccount", {}), f'{w["metadata"]["name"]}: service account {sa} exists')
        for vol in spec.get("volumes", []):
            if "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"]["claimName"]
                check(claim in by_kind.get("PersistentVolumeClaim", {}), f'{w["metadata"]["name"]}: PVC {claim} exists')
            if "configMap" in vol:
                check(vol["configMap"]["name"] in by_kind.get("ConfigMap", {}),
                      f'{w["metadata"]["name"]}: ConfigMap {vol["configMap"]["name"]} exists')
            if "secret" in vol:
                s = vol["secret"]["secretName"]
                check(s in by_kind.get("Secret", {}) or s in EXTERNAL_SECRETS, f'{w["metadata"]["name"]}: Secret {s} exists or is documented')
        mounted = {v["name"] for c in spec["containers"] for v in c.get("volumeMounts", [])}
        check(mounted == {v["name"] for v in spec.get("volumes", [])}, f'{w["metadata"]["name"]}: every volume is mounted, every mount has a volume')
        for c in spec["containers"]:
            check(c["image"] != "verl-cpp" and ":" in c["image"], f'{w["metadata"]["name"]}: image set by kustomize ({c["image"]})')

    def pods_selected(selector):
        return [w for w in workloads if matches(selector, pod_template(w)["metadata"]["labels"])]

    def port_names(w):
        return {p["name"]: p["containerPort"] for c in containers(w) for p in c.get("ports", [])}

    for name, svc in by_kind.get("Service", {}).items():
        targets = pods_selected(svc["spec"]["selector"])
        check(len(targets) == 1, f"Service/{name} selects one workload's pods")
        for p in svc["spec"]["ports"]:
            check(all(p["targetPort"] in port_names(t) for t in targets), f"Service/{name}: targetPort {p['targetPort']} is a container port")
    sts = by_kind["StatefulSet"]["verl-worker"]
    headless = by_kind["Service"].get(sts["spec"]["serviceName"])
    check(headless is not None and headless["spec"].get("clusterIP") == "None", "the StatefulSet's serviceName is a headless Service")
    for name, rb in by_kind.get("RoleBinding", {}).items():
        check(rb["roleRef"]["name"] in by_kind.get("Role", {}), f"RoleBinding/{name}: role exists")
        check(all(s["name"] in by_kind["ServiceAccount"] for s in rb["subjects"]), f"RoleBinding/{name}: subjects exist")
    for name, sm in by_kind.get("ServiceMonitor", {}).items():
        svcs = [s for s in by_kind["Service"].values() if matches(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        check(len(svcs) == 1 and all(any(p["name"] == e["port"] for p in svcs[0]["spec"]["ports"]) for e in sm["spec"]["endpoints"]),
              f"ServiceMonitor/{name} selects a Service with its port")
    for name, pm in by_kind.get("PodMonitor", {}).items():
        ws = pods_selected(pm["spec"]["selector"]["matchLabels"])
        check(len(ws) == 1 and all(e["port"] in port_names(ws[0]) for e in pm["spec"]["podMetricsEndpoints"]),
              f"PodMonitor/{name} selects pods with its port")
    for name, np in by_kind.get("NetworkPolicy", {}).items():
        check(len(pods_selected(np["spec"]["podSelector"]["matchLabels"])) == 1, f"NetworkPolicy/{name} selects pods")

    # The daemons' flags agree with the pod specs.
    ctl = by_kind["Deployment"]["verl-controller"]
    c = containers(ctl)[0]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    ports = port_names(ctl)
    check(c["args"][0] == "serve", "the controller runs `verl-controller serve`")
    check(arg_value(c["args"], "--listen").endswith(f":{ports['grpc']}"), "--listen is the grpc port")
    check(arg_value(c["args"], "--metrics-listen") == f":{ports['metrics']}", "--metrics-listen is the metrics port")
    check(arg_value(c["args"], "--token-file").startswith(mounts["token"] + "/"), "--token-file is in the token Secret's mount")
    token_key = arg_value(c["args"], "--token-file").rsplit("/", 1)[1]
    check(token_key in by_kind["Secret"]["verl-token"]["stringData"], f"the token Secret has key {token_key}")
    check(arg_value(c["args"], "--tls-cert").startswith(mounts["tls"] + "/"), "--tls-cert is in the TLS Secret's mount")
    check(arg_value(c["args"], "--state-dir") == mounts["state"], "--state-dir is the state volume")
    check(ctl["spec"]["replicas"] == 1 and ctl["spec"]["strategy"]["type"] == "Recreate",
          "one controller, replaced with Recreate (single writer of the state directory)")
    w = containers(sts)[0]
    wports = port_names(sts)
    ranks = int(arg_value(w["args"], "--ranks"))
    gpus = int(w["resources"]["limits"]["nvidia.com/gpu"])
    check(ranks == gpus, f"worker --ranks ({ranks}) = GPUs requested ({gpus})")
    check(arg_value(w["args"], "--listen").endswith(f":{wports['grpc']}"), "worker --listen is its grpc port")
    check(arg_value(w["args"], "--metrics-listen") == f":{wports['metrics']}", "worker --metrics-listen is its metrics port")
    for d, c_ in ((ctl, c), (sts, w)):
        ok, err = daemon_accepts(build, c_["command"], c_["args"])
        check(ok, f'{d["metadata"]["name"]}: {c_["command"][0]} accepts its container args {err}')

    # 4. The job file: our own loader, and agreement with the cluster.
    job_yaml = by_kind["ConfigMap"]["verl-job"]["data"]["job.yaml"]
    tmp = tempfile.mkdtemp(prefix="verl_k8s_")
    try:
        path = os.path.join(tmp, "job.yaml")
        open(path, "w").write(job_yaml)
        r = subprocess.run([os.path.join(build, "bin", "verl-controller"), "--config", path, "--print-config"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"the ConfigMap's job.yaml passes verl-controller --print-config {r.stderr[:500]}")
        resolved = yaml.safe_load(r.stdout) if r.returncode == 0 else {}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if resolved:
        t = resolved["trainer"]
        check(t["nnodes"] == sts["spec"]["replicas"], f"trainer.nnodes ({t['nnodes']}) = worker replicas")
        check(t["n_gpus_per_node"] == ranks, "trainer.n_gpus_per_node = --ranks")
        check(t["device"] == "cuda" and arg_value(w["args"], "--device") == "cuda", "cuda jobs on cuda workers")
        want = [f"{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}:{wports['grpc']}"
                for i in range(sts["spec"]["replicas"])]
        check(resolved["cluster"]["worker_addresses"] == want, f"cluster.worker_addresses = {want}")
        for key in (resolved["trainer"]["default_local_dir"], resolved["actor_rollout_ref"]["model"]["path"]):
            check(key.startswith("/data/"), f"{key} is on the shared volume")

    # 1b. The real kustomize, where there is one.
    tool = shutil.which("kustomize")
    cmd = [tool, "build", base] if tool else ([shutil.which("kubectl"), "kustomize", base] if shutil.which("kubectl") else None)
    if cmd:
        r = subprocess.run(cmd, capture_output=True, text=True)
        rendered = [d for d in yaml.safe_load_all(r.stdout) if d] if r.returncode == 0 else []
        check(r.returncode == 0 and len(rendered) == len(docs), f"{' '.join(cmd[:2])} renders {len(docs)} objects")
    else:
        print("note: no kustomize or kubectl on PATH; kustomize build not run (its transformations are re-done above)")

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
