// The real node's own small programs (standard library only), built by ../scripts/build.sh --node.
module capi-provider-operator.local/node

go 1.24.0
