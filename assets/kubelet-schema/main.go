// Prints the shape of kubelet's KubeletConfiguration (kubelet.config.k8s.io/v1beta1) as JSON,
// read by reflection from kubelet's own Go types at the pinned Kubernetes version: the field
// names its decoder accepts and the JSON kind each takes. kctl checks worker profiles against it.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// shape is one JSON value's kind: bool, int, number, string, scalar (a type that decodes itself
// from a string or number, such as a duration or a quantity), object, map, list or any.
type shape struct {
	Kind   string            `json:"kind"`
	Fields map[string]*shape `json:"fields,omitempty"`
	Values *shape            `json:"values,omitempty"`
	Items  *shape            `json:"items,omitempty"`
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func shapeOf(t reflect.Type, depth int) *shape {
	if depth > 12 {
		panic(fmt.Sprintf("%s nests too deep", t))
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) || t.Implements(unmarshaler) {
		return &shape{Kind: "scalar"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return &shape{Kind: "bool"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &shape{Kind: "int"}
	case reflect.Float32, reflect.Float64:
		return &shape{Kind: "number"}
	case reflect.String:
		return &shape{Kind: "string"}
	case reflect.Map:
		return &shape{Kind: "map", Values: shapeOf(t.Elem(), depth+1)}
	case reflect.Slice, reflect.Array:
		return &shape{Kind: "list", Items: shapeOf(t.Elem(), depth+1)}
	case reflect.Interface:
		return &shape{Kind: "any"}
	case reflect.Struct:
		s := &shape{Kind: "object", Fields: map[string]*shape{}}
		addFields(s, t, depth)
		return s
	}
	panic(fmt.Sprintf("no JSON shape for %s (%s)", t, t.Kind()))
}

func addFields(s *shape, t reflect.Type, depth int) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			addFields(s, ft, depth)
			continue
		}
		if name == "" {
			name = f.Name
		}
		s.Fields[name] = shapeOf(f.Type, depth+1)
	}
}

func main() {
	s := shapeOf(reflect.TypeOf(kubeletv1beta1.KubeletConfiguration{}), 0)
	keys := make([]string, 0, len(s.Fields))
	for k := range s.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(os.Stderr, "%d top-level fields\n", len(keys))
	os.Stdout.Write(append(out, '\n'))
}
