package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	kjson "sigs.k8s.io/json"
)

// DecodeStrict decodes the document into out, rejecting unknown, duplicate and mistyped fields.
// Every problem is returned as a FieldError naming the line and field path.
func (d *Document) DecodeStrict(out any) ErrorList {
	strictErrs, err := kjson.UnmarshalStrict(d.JSON, out)
	var errs ErrorList
	if err != nil {
		// encoding/json reports type errors without list indices and errors of custom decoders
		// (quantities, times) without any path: find the failing value by decoding piece by piece.
		field, t, cause := locate(reflect.TypeOf(out), d.JSON, "")
		if cause == nil {
			field, t, cause = "", nil, err
		}
		errs = append(errs, d.Errorf(field, "%s", decodeMessage(cause, t)))
	}
	for _, se := range strictErrs {
		var fe kjson.FieldError
		if !errors.As(se, &fe) {
			errs = append(errs, d.Errorf("", "%s", se.Error()))
			continue
		}
		kind := "unknown field"
		if strings.HasPrefix(se.Error(), "duplicate field") {
			kind = "duplicate field"
		}
		errs = append(errs, d.Errorf(fe.FieldPath(), "%s", kind))
	}
	return errs
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// locate finds the deepest value of raw that does not decode into t and returns its path, the
// type it should have had and the error; a nil error means raw decodes.
func locate(t reflect.Type, raw json.RawMessage, path string) (string, reflect.Type, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, reflect.New(t).Interface())
	if err == nil {
		return "", nil, nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return path, t, err
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return path, t, err
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			if ft, ok := fields[k]; ok {
				if p, ft, e := locate(ft, obj[k], join(k)); e != nil {
					return p, ft, e
				}
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return path, t, err
		}
		for _, k := range sortedKeys(obj) {
			if p, ft, e := locate(t.Elem(), obj[k], join(k)); e != nil {
				return p, ft, e
			}
		}
	case reflect.Slice:
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return path, t, err
		}
		for i, el := range list {
			if p, ft, e := locate(t.Elem(), el, fmt.Sprintf("%s[%d]", path, i)); e != nil {
				return p, ft, e
			}
		}
	}
	return path, t, err
}

// jsonFields maps the JSON names of a struct's fields, inline fields included, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case name == "" && f.Anonymous:
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range jsonFields(ft) {
				out[k] = v
			}
		case name == "":
			out[f.Name] = f.Type
		default:
			out[name] = f.Type
		}
	}
	return out
}

var typeErrRE = regexp.MustCompile(`cannot unmarshal (\w+) into`)

// decodeMessage says what was wrong with a value that should have been of type t.
func decodeMessage(err error, t reflect.Type) string {
	text := strings.TrimPrefix(err.Error(), "json: ")
	if m := typeErrRE.FindStringSubmatch(text); m != nil && t != nil {
		return fmt.Sprintf("expected %s, got %s", kindName(t), m[1])
	}
	return text
}

func kindName(t reflect.Type) string {
	if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
		switch t.Name() {
		case "IntOrString":
			return "an integer or a string"
		case "Quantity":
			return "a quantity such as 100m or 1Gi"
		case "Time":
			return "an RFC 3339 time"
		case "Duration":
			return "a duration such as 10m"
		}
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a map"
	}
	return t.String()
}

// decodeOne decodes file, which must hold exactly one document of kind in gitbroker's
// apiVersion, strictly into out: the prelude of the recorder's status records.
func decodeOne(file string, data []byte, kind string, out any) (*Document, ErrorList) {
	docs, err := SplitDocuments(file, data)
	if err != nil {
		return nil, ErrorList{err.(*FieldError)}
	}
	if len(docs) != 1 {
		return nil, ErrorList{{File: file, Message: fmt.Sprintf("expected exactly one %s document, found %d", kind, len(docs))}}
	}
	d := docs[0]
	apiVersion, got := d.TypeMeta()
	if got != kind {
		return nil, ErrorList{d.Errorf("kind", "expected kind %q, got %q", kind, got)}
	}
	if apiVersion != APIVersion {
		return nil, ErrorList{d.Errorf("apiVersion", "expected %q, got %q", APIVersion, apiVersion)}
	}
	if errs := d.DecodeStrict(out); len(errs) > 0 {
		errs.Sort()
		return nil, errs
	}
	return d, nil
}
