// Package mistakes reads the corpus of broken Configurations in api/testdata/mistakes: each file
// is a realistic Configuration with one mistake people make, the line of it marked "# mistake",
// and a header that says which field gitbroker must name and what the API server says about the
// objects rendered from it. api's tests check gitbroker refuses each; e2e's TestMistakesCorpus
// checks the API server does, so the corpus stays true as Kubernetes changes.
package mistakes

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Mistake is one file of the corpus.
type Mistake struct {
	File  string // the file's base name
	Data  []byte
	About string // the header's first line: what is wrong
	Field string // the field gitbroker must name
	Line  int    // the line marked "# mistake", which gitbroker must name
	// APIServer is a part of the API server's message when it refuses the rendered object; empty
	// when the API server accepts it and only the kubelet refuses (Kubelet says how).
	APIServer string
	Kubelet   string
}

// Load reads every *.yaml file in dir, sorted by name.
func Load(dir string) ([]Mistake, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Mistake
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m, err := parse(filepath.Base(f), data)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func parse(name string, data []byte) (Mistake, error) {
	m := Mistake{File: name, Data: data}
	accepts := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasSuffix(line, "# mistake") {
			if m.Line != 0 {
				return m, fmt.Errorf("%s:%d: a second line marked # mistake (the first is %d)", name, n, m.Line)
			}
			m.Line = n
		}
		header, ok := strings.CutPrefix(line, "# ")
		if !ok {
			continue
		}
		key, value, _ := strings.Cut(header, ": ")
		switch {
		case n == 1:
			m.About = header
		case key == "field":
			m.Field = value
		case key == "apiserver" && value == "accepts":
			accepts = true
		case key == "apiserver":
			m.APIServer = value
		case key == "kubelet":
			m.Kubelet = value
		}
	}
	switch {
	case m.Line == 0:
		return m, fmt.Errorf("%s: no line is marked # mistake", name)
	case m.Field == "":
		return m, fmt.Errorf("%s: no '# field:' header", name)
	case m.APIServer == "" && !(accepts && m.Kubelet != ""):
		return m, fmt.Errorf("%s: no '# apiserver:' header (a part of its message, or 'accepts' with a '# kubelet:' reason)", name)
	}
	return m, nil
}
