#!/usr/bin/env bash
# Partitioned peers across network namespaces: three "hosts" (ip netns) on a
# bridge, each link with tc netem delay and loss (where the kernel has
# sch_netem; else a 200 Mbit/s tbf link and 0.3% random loss with nftables,
# said in the output), each daemon's sockets in
# its host (nsenter --net: the mount stays visible here). Epoch 0 reads each
# byte from storage about once, epoch 1 none, every file identical; then a
# host's link goes down mid-epoch and the others still read every file right
# (the dead peer is timed out and its items come from storage).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/peer_lib.sh"

command -v ip > /dev/null && command -v tc > /dev/null && command -v nsenter > /dev/null ||
	skip "needs ip, tc and nsenter (iproute2, util-linux)"
tag=ep$$
BR=${tag}br
net_cleanup() {
	for r in 0 1 2; do ip netns del "${tag}n$r" 2>/dev/null; done
	ip link del "$BR" 2>/dev/null
	peer_cleanup
}
trap net_cleanup EXIT
ip link add "$BR" type bridge 2>/dev/null || skip "cannot create a bridge here"
ip link set "$BR" up
for r in 0 1 2; do
	ns=${tag}n$r
	ip netns add "$ns" || skip "cannot create network namespaces here"
	ip link add "${tag}h$r" type veth peer name "${tag}c$r" || skip "no veth"
	ip link set "${tag}c$r" netns "$ns"
	ip link set "${tag}h$r" master "$BR" up
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "10.213.7.$((r + 1))/24" dev "${tag}c$r"
	ip -n "$ns" link set "${tag}c$r" up
	if tc -n "$ns" qdisc add dev "${tag}c$r" root netem delay 2ms 1ms loss 0.5% 2>/dev/null; then
		LINKS="netem links (2 +- 1 ms, 0.5% loss)"
	else
		# No sch_netem (this machine kind's kernel): a token bucket makes
		# the link slow (200 Mbit/s, packets queued up to 5 ms, dropped
		# past that), and nftables drops 0.3% of TCP packets at random.
		tc -n "$ns" qdisc add dev "${tag}c$r" root tbf rate 200mbit burst 128kb latency 5ms 2>/dev/null &&
			LINKS="200 Mbit/s tbf links" || LINKS="plain links"
		if command -v nft > /dev/null && ip netns exec "$ns" nft -f - 2>/dev/null <<-NFT
			table inet lossy {
				chain in {
					type filter hook input priority 0;
					meta l4proto tcp numgen random mod 1000 < 3 counter drop
				}
			}
		NFT
		then
			LINKS="$LINKS, 0.3% loss (nft; this kernel has no sch_netem)"
		else
			LINKS="$LINKS, no loss (no sch_netem, no nft)"
		fi
	fi
done
nsenter --net=/run/netns/${tag}n0 python3 -c "import socket; socket.create_connection((\"10.213.7.2\", 9), 2)" 2>&1 | grep -q -E "refused|ConnectionRefused" || skip "the namespaces cannot reach each other"

"$GEN" "$T/src" --files 150 --classes 3 --seed 12 > /dev/null 2>&1 || fail "gen"
PEERS=10.213.7.1:7070,10.213.7.2:7070,10.213.7.3:7070
head -c 32 /dev/urandom | base64 > "$T/secret"
chmod 600 "$T/secret"
for r in 0 1 2; do
	NODE_WRAP="nsenter --net=/run/netns/${tag}n$r" start_node "$r" -- --peers "$PEERS" \
		--secret-file "$T/secret" --peer-timeout 1
done
bytes=$(stat_of "$T/m0" bytes_total)

epoch_all 0 "epoch 0"
s0=$(total storage_read_bytes)
# Each item once from storage, but a peer fetch that times out on a lossy
# link (0.3% drop, --peer-timeout 1, slower still under the sanitizers)
# falls back to storage, correctly, and so does every read of that node's
# items while the connection backs off (0.5 s and more): peer_fallback_bytes
# counts them. Beyond those, nothing may be read twice.
e0=$(total peer_errors)
f0=$(total peer_fallback_bytes)
[ "$e0" -gt 0 ] || [ "$f0" = 0 ] || fail "epoch 0: $f0 bytes fell back to storage with no peer fault"
[ "$s0" -le $((bytes * 105 / 100 + f0)) ] ||
	fail "epoch 0 read $s0 storage bytes for $bytes ($e0 peer errors, $f0 bytes fell back)"
ok "epoch 0 over $LINKS: $s0 storage bytes for a $bytes-byte dataset ($e0 peer faults sent $f0 to storage); files identical"

drop_caches
epoch_all 5 "epoch 1"
s1=$(total storage_read_bytes)
[ "$((s1 - s0))" -le $((bytes / 50)) ] || fail "epoch 1 read $((s1 - s0)) storage bytes"
dropped() { # TCP packets nftables dropped on the way into the 3 hosts so far
	local r n=0 d
	for r in 0 1 2; do
		d=$(ip netns exec "${tag}n$r" nft list chain inet lossy in 2>/dev/null | grep -o 'packets [0-9]*' | cut -d' ' -f2)
		n=$((n + ${d:-0}))
	done
	echo $n
}
ok "epoch 1: $((s1 - s0)) storage bytes (peer faults fall back: $(total peer_errors) errors; $(dropped) packets dropped so far)"

# Host 2's link goes down mid-epoch: its peers time out, nobody errors.
drop_caches
read_all 0 7 > "$T/bad0" & a=$!
read_all 1 8 > "$T/bad1" & b=$!
sleep 0.2
ip -n "${tag}n2" link set "${tag}c2" down
wait $a $b
[ "$(cat "$T/bad0")" = 0 ] && [ "$(cat "$T/bad1")" = 0 ] || fail "a reader saw wrong bytes when host 2 went away"
grep -q "10.213.7.3" "$T/err0" || fail "node 0 did not notice host 2 going away"
f2=$(total peer_fallback_bytes)
[ "$f2" -gt "$f0" ] || fail "host 2's items came from storage, but peer_fallback_bytes stayed at $f2"
ok "host 2 unreachable mid-epoch: nodes 0 and 1 read every file right ($((f2 - f0)) bytes fell back to storage)"
ip -n "${tag}n2" link set "${tag}c2" up
for r in 0 1 2; do stop_node "$r"; done
! grep -E "AddressSanitizer|runtime error" "$T"/err* || fail "sanitizer reports above"
