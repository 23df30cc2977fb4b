# shellcheck shell=bash
# Sourced by images.sh and real-node-up.sh: a local OCI registry, Debian's docker-registry
# (distribution v2.8, the one the OCI source tests run), over TLS, with basic authentication when
# given an htpasswd file.

# registry_cert DIR IP: a self-signed serving certificate for IP, DIR/tls.crt and DIR/tls.key;
# the certificate is its own CA (containerd's hosts.toml `ca`, crane's SSL_CERT_FILE).
registry_cert() {
  local d=$1 ip=$2
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 -subj /CN=capi-registry \
    -addext "subjectAltName=IP:$ip" -keyout "$d/tls.key" -out "$d/tls.crt" 2>/dev/null
}

# registry_htpasswd FILE USER PASSWORD: the bcrypt entry distribution accepts ($2b$, glibc's crypt).
registry_htpasswd() {
  python3 -W ignore -c 'import crypt, sys; print(sys.argv[1] + ":" + crypt.crypt(sys.argv[2], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))' \
    "$2" "$3" >"$1"
}

# registry_start PIDFILE STORAGE ADDR CERTDIR HTPASSWD|- ro|rw: starts the registry in a session
# of its own (cluster-down.sh stops every DIR/*.pid's group) and waits until /v2/ answers. A
# read-only one serves several clusters from one storage without writing to it.
registry_start() {
  local pidfile=$1 storage=$2 addr=$3 certs=$4 htpasswd=$5 mode=$6 conf code
  conf="${pidfile%.pid}.yml"
  mkdir -p "$storage"
  {
    echo "version: 0.1"
    echo "log: {level: warn, accesslog: {disabled: true}}"
    echo "storage:"
    echo "  filesystem: {rootdirectory: $storage}"
    if [[ "$mode" == ro ]]; then
      echo "  maintenance: {readonly: {enabled: true}, uploadpurging: {enabled: false}}"
    fi
    echo "http:"
    echo "  addr: $addr"
    echo "  secret: capi-registry"
    echo "  tls: {certificate: $certs/tls.crt, key: $certs/tls.key}"
    if [[ "$htpasswd" != - ]]; then
      echo "auth: {htpasswd: {realm: capi-registry, path: $htpasswd}}"
    fi
  } >"$conf"
  # Not holding the lock of the script that starts it (fd 9, see images.sh).
  setsid docker-registry serve "$conf" >"${pidfile%.pid}.log" 2>&1 </dev/null 9>&- &
  echo $! >"$pidfile"
  for _ in $(seq 1 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$certs/tls.crt" "https://$addr/v2/" || true)
    [[ "$code" == 200 || "$code" == 401 ]] && return 0
    kill -0 "$(cat "$pidfile")" 2>/dev/null || break
    sleep 0.05
  done
  echo "registry: the registry on $addr did not start:" >&2
  cat "${pidfile%.pid}.log" >&2
  return 1
}
