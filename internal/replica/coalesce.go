package replica

import (
	pb "go.etcd.io/raft/v3/raftpb"
)

// coalesce merges the appends of one Ready that follow each other to the
// same member into one message, and likewise their acknowledgements.
//
// Under load a Ready holds several appends for each follower: raft sends
// one for every batch of proposals it steps (each forwarded MsgProp, each
// drain's own) and an empty one carrying the commit index every time an
// acknowledgement advances it. Each is encoded, sent, decoded and stepped
// on its own, and the follower answers each with its own MsgAppResp. Two
// appends a and b to one member, with nothing else to it between them, in
// the same term, where b starts where a ends, say exactly what one append
// of a's entries then b's with b's commit index says: the follower checks
// a's anchor, appends both, and commits as far as b allows (what it would
// have done taking them one by one, a's commit index being no higher). Its
// one acknowledgement covers both: the leader's in-flight window frees
// every append up to the index acknowledged.
//
// Acknowledgements: of two successful MsgAppResps to one member in one
// term, with nothing else to it between them, the later one says all the
// earlier does when its index is not lower (the leader takes the highest
// match it hears), so the earlier one is dropped. Rejections are never
// touched: each carries its own hint.
//
// Merged appends stay under maxBytes of entries (estimated generously), so
// no merge makes a message larger than a peer accepts. The messages given
// are changed in place (raft hands them over with the Ready); the result
// reuses msgs' backing array.
func coalesce(msgs []*pb.Message, maxBytes uint64) []*pb.Message {
	if len(msgs) < 2 {
		return msgs
	}
	// latest: for each member, the position in out of the latest message
	// to it (a group has a handful of members: a slice, not a map).
	type latest struct {
		to uint64
		at int
	}
	var buf [8]latest
	seen := buf[:0]
	out := msgs[:0]
next:
	for _, m := range msgs {
		to := m.GetTo()
		for k := range seen {
			if seen[k].to != to {
				continue
			}
			if merge(out[seen[k].at], m, maxBytes) {
				continue next
			}
			seen[k].at = len(out)
			out = append(out, m)
			continue next
		}
		seen = append(seen, latest{to, len(out)})
		out = append(out, m)
	}
	clear(msgs[len(out):]) // what was merged away is not kept alive
	return out
}

// merge folds m into p, the message before it to the same member, when
// one message says what both do (see coalesce); false leaves both.
func merge(p, m *pb.Message, maxBytes uint64) bool {
	if p.GetType() != m.GetType() || p.GetTerm() != m.GetTerm() || p.GetFrom() != m.GetFrom() {
		return false
	}
	switch m.GetType() {
	case pb.MsgApp:
		pe, me := p.GetEntries(), m.GetEntries()
		end, endTerm := p.GetIndex(), p.GetLogTerm()
		if n := len(pe); n > 0 {
			end, endTerm = pe[n-1].GetIndex(), pe[n-1].GetTerm()
		}
		if m.GetIndex() != end || m.GetLogTerm() != endTerm || m.GetCommit() < p.GetCommit() ||
			len(m.GetContext())+len(p.GetContext()) > 0 || m.GetSnapshot() != nil || p.GetSnapshot() != nil {
			return false
		}
		if len(me) > 0 {
			if appendBytes(pe)+appendBytes(me) > maxBytes {
				return false
			}
			// A new slice: raft's entry slices may share its log's array.
			ents := make([]*pb.Entry, 0, len(pe)+len(me))
			p.Entries = append(append(ents, pe...), me...)
		}
		p.Commit = m.Commit
		return true
	case pb.MsgAppResp:
		// handleAppendEntries and handleSnapshot set the index alone.
		if p.GetReject() || m.GetReject() || m.GetIndex() < p.GetIndex() || p.GetCommit() != m.GetCommit() ||
			p.GetLogTerm() != m.GetLogTerm() || p.GetRejectHint() != m.GetRejectHint() ||
			len(p.GetEntries())+len(m.GetEntries())+len(p.GetContext())+len(m.GetContext()) > 0 {
			return false
		}
		p.Index = m.Index
		return true
	}
	return false
}

// appendBytes bounds the encoded size of ents from above: each entry's
// data and a generous allowance for its index, term, type and framing.
func appendBytes(ents []*pb.Entry) uint64 {
	n := uint64(0)
	for _, e := range ents {
		n += uint64(len(e.GetData())) + 32
	}
	return n
}
