#!/usr/bin/env bash
# Writes the local control plane's certificates into DIR: a CA, the apiserver serving pair,
# the service-account signing pair and an admin client certificate in system:masters.
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR}
mkdir -p "$dir"; cd "$dir"
ec() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
ec ca.key
openssl req -x509 -new -key ca.key -sha256 -days 30 -subj "/CN=capi-local-ca" -out ca.crt 2>/dev/null
cat > san.cnf <<'CNF'
[ext]
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
[client]
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
CNF
leaf() { # name, subject, extension section
  ec "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -sha256 \
    -extfile san.cnf -extensions "$3" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr"
}
leaf apiserver "/CN=kube-apiserver" ext
leaf admin "/O=system:masters/CN=admin" client
ec sa.key
openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
chmod 600 ./*.key
