package meshnode_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// README and CI agree: the Debian packages the set-up table of README.md names are
// exactly those .ci/run installs (itself or through the scripts/ensure-*.sh it runs), and
// .ci/run runs make lint before make test. A tool a test needs that README does not
// name, or that CI installs without README saying why, fails here.
func TestCI_InstallsWhatREADMENamesAndLintsFirst(t *testing.T) {
	readme := readFile(t, "README.md")
	named := readmePackages(t, readme)
	ci := readFile(t, ".ci/run")
	installed := aptInstalls(ci)
	for _, script := range calledScripts.FindAllString(ci, -1) {
		installed = append(installed, aptInstalls(readFile(t, strings.TrimPrefix(script, "./")))...)
	}
	slices.Sort(named)
	slices.Sort(installed)
	installed = slices.Compact(installed)
	if !slices.Equal(named, slices.Compact(named)) {
		t.Errorf("README's set-up table names a package twice: %v", named)
	}
	if !slices.Equal(named, installed) {
		t.Errorf("README's set-up table names the packages %v; .ci/run installs %v", named, installed)
	}
	lint, test := commandLine(ci, "make lint"), commandLine(ci, "make test")
	if lint < 0 || test < 0 || lint > test {
		t.Errorf(".ci/run must run make lint before make test (make lint: %s, make test: %s)", where(lint), where(test))
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmePackages returns the packages in the last column of README's set-up table (the
// table whose header begins "| Tool |"), each in backquotes.
func readmePackages(t *testing.T, readme string) []string {
	t.Helper()
	var pkgs []string
	in := false
	for _, line := range strings.Split(readme, "\n") {
		switch {
		case strings.HasPrefix(line, "| Tool |"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), "|")
		for _, m := range backquoted.FindAllStringSubmatch(cells[len(cells)-1], -1) {
			pkgs = append(pkgs, m[1])
		}
	}
	if len(pkgs) == 0 {
		t.Fatal(`README.md has no set-up table ("| Tool | ... | Debian packages |") naming what make test needs`)
	}
	return pkgs
}

var backquoted = regexp.MustCompile("`([^`]+)`")

// calledScripts matches the scripts of the repository .ci/run runs.
var calledScripts = regexp.MustCompile(`(?m)^\./scripts/[\w.-]+\.sh`)

// aptInstalls returns the packages of every "apt-get install" command in a shell
// script (not those quoted in a message).
func aptInstalls(script string) []string {
	var pkgs []string
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		before, rest, ok := strings.Cut(line, "apt-get install")
		if !ok || strings.Count(before, `"`)%2 == 1 || strings.Count(before, "'")%2 == 1 {
			continue // not a command: words of a message
		}
		for _, w := range strings.Fields(rest) {
			w = strings.TrimRight(w, ";")
			if w == "&&" || w == "||" || w == "}" || w == ";" {
				break
			}
			if w != "" && !strings.HasPrefix(w, "-") {
				pkgs = append(pkgs, w)
			}
		}
	}
	return pkgs
}

func where(line int) string {
	if line < 0 {
		return "not run"
	}
	return fmt.Sprintf("line %d", line+1)
}

// commandLine returns the index of the first line of script that is cmd alone, or -1.
func commandLine(script, cmd string) int {
	for i, line := range strings.Split(script, "\n") {
		if strings.TrimSpace(line) == cmd {
			return i
		}
	}
	return -1
}
