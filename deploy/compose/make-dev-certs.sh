#!/usr/bin/env bash
# Makes the development PKI at deploy time, so no private key is ever committed: a CA, one
# server certificate per backend and client certificates, ECDSA P-256 (openssl; the
# postgres:16-bookworm image has it). The docker compose cluster runs it as the one-shot `pki`
# service; the dev Kubernetes overlay runs the same text (kept identical by deploy/validate.sh)
# in the dev-pki Job, which stores the result as Secrets.
#
#   make-dev-certs.sh OUT
#
# DEV_PKI_SERVERS  "name[:uid] …": OUT/<name>/{ca.crt,tls.crt,tls.key}, valid for <name>,
#                  <name>.<domain> for each of DEV_PKI_DOMAINS, localhost and 127.0.0.1
#                  (serverAuth)
# DEV_PKI_CLIENTS  "dir/name[:uid] …": OUT/<dir>/{ca.crt,<name>.crt,<name>.key}, common name
#                  <dir>-<name> (clientAuth); a name of `tls` gives tls.crt/tls.key
# DEV_PKI_DOMAINS  extra DNS suffixes, e.g. "skua-dev.svc skua-dev.svc.cluster.local"
#
# Run as root, each directory and key is given to its uid (keys 0600, as Postgres demands of
# ssl_key_file; certificates 0644). The CA's key exists only while this runs. When OUT already
# holds every file asked for, nothing is made again (a restarted cluster keeps its certificates).
set -euo pipefail

out=${1:?usage: make-dev-certs.sh OUT}
servers=${DEV_PKI_SERVERS:-}
clients=${DEV_PKI_CLIENTS:-}
domains=${DEV_PKI_DOMAINS:-}
days=${DEV_PKI_DAYS:-825}

# "name[:uid]" -> files wanted
wanted=("$out/ca.crt")
for s in $servers; do wanted+=("$out/${s%%:*}/tls.key"); done
for c in $clients; do wanted+=("$out/${c%%:*}.key"); done
complete=1
for f in "${wanted[@]}"; do [[ -s $f ]] || complete=0; done
if ((complete)); then
    echo "dev PKI: $out already complete, kept"
    exit 0
fi

umask 077
mkdir -p "$out"
chmod 0755 "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/dev-pki.XXXXXX")
trap 'rm -rf "$work"' EXIT

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# The CA: self-signed, may sign leaf certificates only (pathlen 0).
newkey "$work/ca.key"
cat >"$work/ca.ext" <<'EOF'
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
openssl req -new -key "$work/ca.key" -subj "/O=Skua development/CN=Skua dev CA" -out "$work/ca.csr"
openssl x509 -req -in "$work/ca.csr" -signkey "$work/ca.key" -days "$days" -sha256 \
    -extfile "$work/ca.ext" -out "$out/ca.crt" 2>/dev/null
chmod 0644 "$out/ca.crt"

# issue DIR NAME CN UID EXTFILE: DIR/NAME.crt and DIR/NAME.key signed by the CA.
issue() {
    local dir=$1 name=$2 cn=$3 uid=$4 ext=$5
    mkdir -p "$dir"
    newkey "$dir/$name.key"
    openssl req -new -key "$dir/$name.key" -subj "/O=Skua development/CN=$cn" -out "$work/$cn.csr"
    openssl x509 -req -in "$work/$cn.csr" -CA "$out/ca.crt" -CAkey "$work/ca.key" -CAcreateserial \
        -CAserial "$work/ca.srl" -days "$days" -sha256 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
    cp "$out/ca.crt" "$dir/ca.crt"
    chmod 0644 "$dir/$name.crt" "$dir/ca.crt"
    chmod 0600 "$dir/$name.key"
    if [[ -n $uid && $(id -u) == 0 ]]; then
        chown "$uid:$uid" "$dir" "$dir/$name.key"
        chmod 0755 "$dir"
    fi
}

for s in $servers; do
    name=${s%%:*}
    uid=${s#"$name"}
    uid=${uid#:}
    sans="DNS:$name"
    for d in $domains; do sans+=",DNS:$name.$d"; done
    sans+=",DNS:localhost,IP:127.0.0.1"
    cat >"$work/$name.ext" <<EOF
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = $sans
authorityKeyIdentifier = keyid
EOF
    issue "$out/$name" tls "$name" "$uid" "$work/$name.ext"
    echo "dev PKI: server certificate $out/$name/tls.crt for $sans"
done

for c in $clients; do
    path=${c%%:*}
    uid=${c#"$path"}
    uid=${uid#:}
    dir=${path%/*}
    name=${path##*/}
    cn="$dir-$name"
    [[ $name == tls ]] && cn=$dir
    cat >"$work/$cn.ext" <<EOF
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:$cn
authorityKeyIdentifier = keyid
EOF
    issue "$out/$dir" "$name" "$cn" "$uid" "$work/$cn.ext"
    echo "dev PKI: client certificate $out/$dir/$name.crt (CN $cn)"
done
echo "dev PKI: CA $out/ca.crt (its key is not kept)"
