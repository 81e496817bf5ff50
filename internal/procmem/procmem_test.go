package procmem

import (
	"os"
	"testing"
)

// The figures of this test process are plausible, and opening a file is one more
// open file.
func TestFigures(t *testing.T) {
	if rss := RSS(); rss < 1<<20 || rss > 1<<34 {
		t.Errorf("RSS %d bytes", rss)
	}
	if h := Heap(); h <= 0 {
		t.Errorf("heap %d bytes", h)
	}
	if m := MaxFiles(); m < 64 {
		t.Errorf("open-files limit %d", m)
	}
	before := OpenFiles()
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if after := OpenFiles(); before < 3 || after != before+1 {
		t.Errorf("open files %d, then %d after opening one", before, after)
	}
}
