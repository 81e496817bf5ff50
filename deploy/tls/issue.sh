#!/bin/sh
# Issues what a meshnode fleet's protections need (docs/security.md), with openssl:
#
#   DIR/ca.key                 the fleet CA's private key: keep it off the nodes, it
#                              signs every node certificate
#   DIR/secret/ca.crt          the fleet CA certificate (--mesh-tls-ca)
#   DIR/secret/ID.crt, ID.key  each node's certificate and key (--mesh-tls-cert,
#                              --mesh-tls-key): a DNS SAN equal to the node id, usable
#                              for server and client authentication, DAYS days (90)
#   DIR/secret/gossip.keys     one gossip encryption key (--gossip-key-file)
#   DIR/secret/admin.token     one admin bearer token (--admin-token-file)
#
# Usage: deploy/tls/issue.sh DIR NODE-ID...
#
# What exists is kept: run it again with more ids to add nodes, with RENEW=1 to issue
# new certificates (and keys) for the ids given, e.g. before the old ones expire. Only
# DIR/secret goes to the nodes (a Kubernetes Secret, a mounted directory, /etc/meshnode).
set -eu
if [ $# -lt 2 ]; then
	echo "usage: $0 DIR NODE-ID..." >&2
	exit 2
fi
dir=$1
shift
days=${DAYS:-90}
umask 077
mkdir -p "$dir/secret"
if [ ! -f "$dir/ca.key" ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$dir/ca.key" -out "$dir/secret/ca.crt" -days 3650 -subj "/CN=meshnode fleet CA" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
for id in "$@"; do
	if [ -f "$dir/secret/$id.crt" ] && [ "${RENEW:-0}" != 1 ]; then
		continue
	fi
	ext="$dir/$id.ext"
	printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\nbasicConstraints=critical,CA:FALSE\n' "$id" >"$ext"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$dir/secret/$id.key.new" -out "$dir/$id.csr" -subj "/CN=$id" 2>/dev/null
	openssl x509 -req -in "$dir/$id.csr" -CA "$dir/secret/ca.crt" -CAkey "$dir/ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$ext" -out "$dir/secret/$id.crt.new" 2>/dev/null
	# Key and certificate replace the old pair one after the other; a node that reads
	# in between keeps its pair and takes the new one at its next check.
	mv "$dir/secret/$id.key.new" "$dir/secret/$id.key"
	mv "$dir/secret/$id.crt.new" "$dir/secret/$id.crt"
	rm -f "$dir/$id.csr" "$ext"
done
[ -f "$dir/secret/gossip.keys" ] || openssl rand -base64 32 >"$dir/secret/gossip.keys"
[ -f "$dir/secret/admin.token" ] || openssl rand -base64 32 >"$dir/secret/admin.token"
echo "issued into $dir/secret: ca.crt, gossip.keys, admin.token and the certificates of: $*"
