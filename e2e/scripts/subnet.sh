# Sourced by the node script (real-node-up.sh): the choice of a free /24 in
# 10.213.0.0/16. Hold the lock (flock on $SUBNET_LOCK) from the choice until the caller has put
# an address of the /24 on an interface, so concurrent clusters never pick the same one.
# shellcheck shell=bash
export SUBNET_LOCK=/tmp/capi-node-cidr.lock

# free_subnet HASH: prints i of a 10.213.i.0/24 that no interface address or route uses, trying
# from a start derived from HASH (hex) so that one cluster directory tends to get the same one.
free_subnet() {
  local used start k i
  used=$( (ip -4 -o addr show; ip -4 route show) 2>/dev/null)
  start=$((16#${1:0:2} % 250 + 1))
  for k in $(seq 0 249); do
    i=$(( (start + k - 1) % 250 + 1 ))
    if ! grep -q "10\.213\.$i\." <<<"$used"; then echo "$i"; return 0; fi
  done
  echo "no free /24 left in 10.213.0.0/16" >&2
  return 1
}
