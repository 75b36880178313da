package zkproto

import "fmt"

// MultiOp is one operation of a multi or multiRead request. Op is:
//
//	OpCreate, OpCreate2, OpCreateContainer  *CreateRequest
//	OpCreateTTL                             *CreateTTLRequest
//	OpDelete                                *DeleteRequest
//	OpSetData                               *SetDataRequest
//	OpCheck                                 *CheckVersionRequest
//	OpGetChildren (multiRead)               *GetChildrenRequest
//	OpGetData (multiRead)                   *GetDataRequest
type MultiOp struct {
	Type int32
	Op   Record
}

// IsReadOp reports whether op may appear in a multiRead.
func IsReadOp(op int32) bool { return op == OpGetChildren || op == OpGetData }

// IsWriteOp reports whether op may appear in a multi (transaction).
func IsWriteOp(op int32) bool {
	switch op {
	case OpCreate, OpCreate2, OpCreateTTL, OpCreateContainer, OpDelete, OpSetData, OpCheck:
		return true
	}
	return false
}

// opRecordMatches reports whether op.Op is the record op.Type is encoded
// with, so Encode cannot emit bytes that decode differently.
func opRecordMatches(op MultiOp) bool {
	switch r := op.Op.(type) {
	case *CreateRequest:
		return r != nil && (op.Type == OpCreate || op.Type == OpCreate2 || op.Type == OpCreateContainer)
	case *CreateTTLRequest:
		return r != nil && op.Type == OpCreateTTL
	case *DeleteRequest:
		return r != nil && op.Type == OpDelete
	case *SetDataRequest:
		return r != nil && op.Type == OpSetData
	case *CheckVersionRequest:
		return r != nil && op.Type == OpCheck
	case *GetChildrenRequest:
		return r != nil && op.Type == OpGetChildren
	case *GetDataRequest:
		return r != nil && op.Type == OpGetData
	}
	return false
}

// multiEnd terminates the op and result lists of both directions.
var multiEnd = MultiHeader{Type: -1, Done: true, Err: -1}

// MultiRequest is the body of multi (write ops, applied atomically) and
// multiRead (read ops, each answered on its own). ZooKeeper's
// MultiOperationRecord: per op a MultiHeader{type, false, -1} and the op's
// request record, then MultiHeader{-1, true, -1}.
type MultiRequest struct {
	Ops []MultiOp
}

func (r *MultiRequest) Encode(e *Encoder) {
	for _, op := range r.Ops {
		if !opRecordMatches(op) {
			e.Fail(fmt.Errorf("multi op %s with %T", OpName(op.Type), op.Op))
			return
		}
		h := MultiHeader{Type: op.Type, Done: false, Err: -1}
		h.Encode(e)
		op.Op.Encode(e)
	}
	end := multiEnd
	end.Encode(e)
}

// Decode reads ops until a header with Done set (whatever its type and err,
// as ZooKeeper does). Reads and writes may not be mixed (ZooKeeper rejects
// that too); DecodeRequest further checks the kind against the opcode.
func (r *MultiRequest) Decode(d *Decoder) error {
	r.Ops = nil
	var h MultiHeader
	for {
		if h.Decode(d) != nil {
			return d.Err()
		}
		if h.Done {
			return nil
		}
		if len(r.Ops) > 0 && IsReadOp(h.Type) != IsReadOp(r.Ops[0].Type) {
			d.fail(ErrBadMultiOp)
			return d.Err()
		}
		var op Record
		switch h.Type {
		case OpCreate, OpCreate2, OpCreateContainer:
			op = new(CreateRequest)
		case OpCreateTTL:
			op = new(CreateTTLRequest)
		case OpDelete:
			op = new(DeleteRequest)
		case OpSetData:
			op = new(SetDataRequest)
		case OpCheck:
			op = new(CheckVersionRequest)
		case OpGetChildren:
			op = new(GetChildrenRequest)
		case OpGetData:
			op = new(GetDataRequest)
		default:
			d.fail(ErrBadMultiOp)
			return d.Err()
		}
		if op.Decode(d) != nil {
			return d.Err()
		}
		r.Ops = append(r.Ops, MultiOp{Type: h.Type, Op: op})
	}
}

// OpResult is one result of a multi response. Type selects the fields:
//
//	OpCreate        Path             (CreateResponse)
//	OpCreate2       Path, Stat       (Create2Response)
//	OpDelete        -                (no body)
//	OpCheck         -                (no body)
//	OpSetData       Stat             (SetDataResponse)
//	OpGetChildren   Children         (GetChildrenResponse, multiRead)
//	OpGetData       Data, Stat       (GetDataResponse, multiRead)
//	OpError         Err              (ErrorResponse)
//
// ZooKeeper reports a multi's create as OpCreate, and createTTL and
// createContainer (and create2 with CreateOptions) as OpCreate2. Note that
// ZooKeeper rewrites a create2 op in a multi to create, so a plain
// create2 op gets an OpCreate result.
type OpResult struct {
	Type     int32
	Err      int32
	Path     string
	Stat     Stat
	Data     []byte
	Children []string
}

// MultiResponse is the body of a multi or multiRead reply: per result a
// MultiHeader{type, false, err} (err is 0 unless type is OpError) and the
// result record, then MultiHeader{-1, true, -1}. A failed multi is sent with
// ReplyHeader.Err 0 and one OpError result per op (see MultiFailure).
type MultiResponse struct {
	Results []OpResult
}

func (r *MultiResponse) Encode(e *Encoder) {
	for i := range r.Results {
		res := &r.Results[i]
		h := MultiHeader{Type: res.Type}
		if res.Type == OpError {
			h.Err = res.Err
		}
		switch res.Type {
		case OpCreate, OpCreate2, OpDelete, OpCheck, OpSetData, OpGetChildren, OpGetData, OpError:
		default:
			e.Fail(fmt.Errorf("multi result %s", OpName(res.Type)))
			return
		}
		h.Encode(e)
		switch res.Type {
		case OpCreate:
			e.Ustring(res.Path)
		case OpCreate2:
			e.Ustring(res.Path)
			res.Stat.Encode(e)
		case OpSetData:
			res.Stat.Encode(e)
		case OpGetChildren:
			e.Strings(res.Children)
		case OpGetData:
			e.Buffer(res.Data)
			res.Stat.Encode(e)
		case OpError:
			e.Int(res.Err)
		}
	}
	end := multiEnd
	end.Encode(e)
}

// Decode follows ZooKeeper's MultiResponse.deserialize: the header's err is
// ignored except through the ErrorResponse body of OpError results.
func (r *MultiResponse) Decode(d *Decoder) error {
	r.Results = nil
	var h MultiHeader
	for {
		if h.Decode(d) != nil {
			return d.Err()
		}
		if h.Done {
			return nil
		}
		res := OpResult{Type: h.Type}
		switch h.Type {
		case OpCreate:
			res.Path = d.Ustring()
		case OpCreate2:
			res.Path = d.Ustring()
			res.Stat.Decode(d)
		case OpDelete, OpCheck:
		case OpSetData:
			res.Stat.Decode(d)
		case OpGetChildren:
			res.Children = d.Strings()
		case OpGetData:
			res.Data = d.Buffer()
			res.Stat.Decode(d)
		case OpError:
			res.Err = d.Int()
		default:
			d.fail(ErrBadMultiResult)
		}
		if d.Err() != nil {
			return d.Err()
		}
		r.Results = append(r.Results, res)
	}
}

// MultiFailure builds ZooKeeper's response to a multi of n ops whose op
// failed (0-based) failed with code: ops before it CodeOK, the failed op
// its code, later ops CodeRuntimeInconsistency, all as OpError results.
func MultiFailure(n, failed int, code int32) *MultiResponse {
	r := &MultiResponse{Results: make([]OpResult, n)}
	for i := range r.Results {
		c := CodeOK
		switch {
		case i == failed:
			c = code
		case i > failed:
			c = CodeRuntimeInconsistency
		}
		r.Results[i] = OpResult{Type: OpError, Err: c}
	}
	return r
}
