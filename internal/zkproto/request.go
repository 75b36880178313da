package zkproto

import "fmt"

// DecodeRequest decodes one client packet after the handshake: a
// RequestHeader and the body its type calls for. The body is returned as a
// pointer to its record:
//
//	OpCreate, OpCreate2, OpCreateContainer  *CreateRequest
//	OpCreateTTL                             *CreateTTLRequest
//	OpDelete                                *DeleteRequest
//	OpDeleteContainer                       *DeleteContainerRequest
//	OpExists                                *ExistsRequest
//	OpGetData                               *GetDataRequest
//	OpSetData                               *SetDataRequest
//	OpGetACL                                *GetACLRequest
//	OpSetACL                                *SetACLRequest
//	OpGetChildren                           *GetChildrenRequest
//	OpGetChildren2                          *GetChildren2Request
//	OpSync                                  *SyncRequest
//	OpCheck                                 *CheckVersionRequest
//	OpMulti, OpMultiRead                    *MultiRequest (write / read ops only)
//	OpReconfig                              *ReconfigRequest
//	OpCheckWatches                          *CheckWatchesRequest
//	OpRemoveWatches                         *RemoveWatchesRequest
//	OpAuth                                  *AuthPacket
//	OpSetWatches                            *SetWatches
//	OpSetWatches2                           *SetWatches2
//	OpSASL                                  *SetSASLRequest
//	OpGetEphemerals                         *GetEphemeralsRequest
//	OpGetAllChildrenNumber                  *GetAllChildrenNumberRequest
//	OpAddWatch                              *AddWatchRequest
//	OpPing, OpCloseSession, OpWhoAmI        nil (no body)
//
// ZooKeeper answers them with: create -> CreateResponse; create2, createTTL,
// createContainer -> Create2Response; delete, deleteContainer, setWatches,
// setWatches2, checkWatches, removeWatches, closeSession, ping, auth -> no
// body; exists -> ExistsResponse; getData -> GetDataResponse; setData and
// check -> SetDataResponse; getACL/setACL -> GetACLResponse/SetACLResponse;
// getChildren(2) -> GetChildren(2)Response; sync -> SyncResponse (the
// path); multi, multiRead -> MultiResponse; addWatch -> ErrorResponse{0};
// whoAmI -> WhoAmIResponse; getEphemerals -> GetEphemeralsResponse;
// getAllChildrenNumber -> GetAllChildrenNumberResponse; sasl ->
// SetSASLResponse. Replies with a non-zero err carry no body.
//
// Errors: if the header itself is short, the returned header is zero and
// the error wraps ErrShortBuffer. For an opcode this codec does not handle
// (including createSession and notification, which clients never send) the
// header is returned with ErrUnknownOpcode, so the server can reply
// CodeUnimplemented and keep the connection. Any other error means a
// malformed body; the header is valid and the server may reply
// CodeMarshallingError or close the connection. Bytes after the body are
// ignored, as ZooKeeper ignores them.
func DecodeRequest(pkt []byte) (RequestHeader, any, error) {
	d := NewDecoder(pkt)
	var h RequestHeader
	if err := h.Decode(d); err != nil {
		return RequestHeader{}, nil, err
	}
	var body Record
	switch h.Type {
	case OpPing, OpCloseSession, OpWhoAmI:
		return h, nil, nil
	case OpCreate, OpCreate2, OpCreateContainer:
		body = new(CreateRequest)
	case OpCreateTTL:
		body = new(CreateTTLRequest)
	case OpDelete:
		body = new(DeleteRequest)
	case OpDeleteContainer:
		body = new(DeleteContainerRequest)
	case OpExists:
		body = new(ExistsRequest)
	case OpGetData:
		body = new(GetDataRequest)
	case OpSetData:
		body = new(SetDataRequest)
	case OpGetACL:
		body = new(GetACLRequest)
	case OpSetACL:
		body = new(SetACLRequest)
	case OpGetChildren:
		body = new(GetChildrenRequest)
	case OpGetChildren2:
		body = new(GetChildren2Request)
	case OpSync:
		body = new(SyncRequest)
	case OpCheck:
		body = new(CheckVersionRequest)
	case OpMulti, OpMultiRead:
		body = new(MultiRequest)
	case OpReconfig:
		body = new(ReconfigRequest)
	case OpCheckWatches:
		body = new(CheckWatchesRequest)
	case OpRemoveWatches:
		body = new(RemoveWatchesRequest)
	case OpAuth:
		body = new(AuthPacket)
	case OpSetWatches:
		body = new(SetWatches)
	case OpSetWatches2:
		body = new(SetWatches2)
	case OpSASL:
		body = new(SetSASLRequest)
	case OpGetEphemerals:
		body = new(GetEphemeralsRequest)
	case OpGetAllChildrenNumber:
		body = new(GetAllChildrenNumberRequest)
	case OpAddWatch:
		body = new(AddWatchRequest)
	default:
		return h, nil, fmt.Errorf("%w %d", ErrUnknownOpcode, h.Type)
	}
	if err := body.Decode(d); err != nil {
		return h, nil, fmt.Errorf("%s: %w", OpName(h.Type), err)
	}
	if m, ok := body.(*MultiRequest); ok {
		allowed := IsWriteOp
		if h.Type == OpMultiRead {
			allowed = IsReadOp
		}
		for _, op := range m.Ops {
			if !allowed(op.Type) {
				return h, nil, fmt.Errorf("%s: %w %s", OpName(h.Type), ErrBadMultiOp, OpName(op.Type))
			}
		}
	}
	return h, body, nil
}

// EncodeRequest encodes a request packet (header and body, no frame
// length); body is nil for bodiless ops. It is the inverse of DecodeRequest,
// used by tests and tools.
func EncodeRequest(hdr RequestHeader, body Record) ([]byte, error) {
	e := NewEncoder(nil)
	hdr.Encode(e)
	if body != nil {
		body.Encode(e)
	}
	return e.Bytes(), e.Err()
}
