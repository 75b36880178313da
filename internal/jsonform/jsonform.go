// Package jsonform is the stable JSON form of Meridian's results: the one
// `meridian ... -o json` prints and the HTTP port's /status serves, so the
// two cannot drift. docs/compatibility.md ("CLI JSON output") is its
// contract: fields are only ever added.
package jsonform

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Write writes v as indented JSON in the stable form (Value).
func Write(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Value(v))
}

// Value converts v to the stable JSON form, the same for every command
// and release: every field is present whatever its value (zero numbers,
// false, "" included; an absent message is null), lists are [] when empty,
// never null. Protocol buffer messages (api/meridianpb) use their fields'
// proto names (snake_case), 64-bit integers are numbers, enums their names
// and bytes a string. Go structs use their json tag names; omitempty is
// ignored.
func Value(v any) any {
	if v == nil {
		return nil
	}
	if m, ok := v.(proto.Message); ok {
		if !m.ProtoReflect().IsValid() {
			return nil
		}
		return protoValue(m.ProtoReflect())
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return string(rv.Bytes())
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = Value(rv.Index(i).Interface())
		}
		return out
	case reflect.Map:
		out := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			out[fmt.Sprint(it.Key().Interface())] = Value(it.Value().Interface())
		}
		return out
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil
		}
		return Value(rv.Elem().Interface())
	case reflect.Struct:
		out := map[string]any{}
		t := rv.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			out[name] = Value(rv.Field(i).Interface())
		}
		return out
	}
	return v
}

func protoValue(m protoreflect.Message) map[string]any {
	out := map[string]any{}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			items := make([]any, l.Len())
			for j := range items {
				items[j] = protoScalar(fd, l.Get(j))
			}
			out[string(fd.Name())] = items
		case fd.IsMap():
			mm := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				mm[k.String()] = protoScalar(fd.MapValue(), mv)
				return true
			})
			out[string(fd.Name())] = mm
		case fd.Message() != nil && !m.Has(fd):
			out[string(fd.Name())] = nil
		default:
			out[string(fd.Name())] = protoScalar(fd, v)
		}
	}
	return out
}

// protoScalar converts one value (a list element, or a singular field).
func protoScalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return protoValue(v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int32(v.Enum())
	case protoreflect.BytesKind:
		return string(v.Bytes())
	}
	return v.Interface()
}
