package orchestrator_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docPages are the Markdown pages whose relative links TestDocLinksResolve checks: the README,
// SECURITY.md and every page of docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md")
	}
	return append([]string{"README.md", "SECURITY.md"}, pages...)
}

var (
	// fence opens or closes a fenced code block.
	fence = regexp.MustCompile("^\\s*(```|~~~)")
	// codeSpan is an inline code span; its text is no link.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	// linkTarget is the target of an inline link or image: "](target)" or "](target "title")".
	linkTarget = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// heading is an ATX heading.
	heading = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	// mdLink is a link in a heading's text, of which only the text is shown.
	mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// scheme starts an absolute URL (http:, https:, mailto:): no file of the repository.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose returns the lines of a Markdown file outside fenced code blocks (blank in their
// place, so line numbers stay).
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// anchors returns the anchors GitHub gives the headings of a Markdown file: the heading's
// text as shown, lowercased, every character but letters, digits, '_', '-' and spaces
// removed, spaces turned into '-'; a repeated anchor gets "-1", "-2", … .
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range prose(text) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		shown := mdLink.ReplaceAllString(m[2], "$1")
		shown = strings.NewReplacer("`", "", "*", "", "<", "", ">", "").Replace(shown)
		var b strings.Builder
		for _, r := range strings.ToLower(shown) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// brokenLinks returns a sentence for each relative link of the page at path that does not
// resolve: the file or directory it names does not exist, or, for a "#anchor" into a
// Markdown file (the page itself when the path is empty), that file has no such heading.
func brokenLinks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var broken []string
	for i, l := range prose(string(b)) {
		l = codeSpan.ReplaceAllString(l, "code")
		for _, m := range linkTarget.FindAllStringSubmatch(l, -1) {
			target := m[1]
			if scheme.MatchString(target) {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				if _, err := os.Stat(dest); err != nil {
					broken = append(broken, path+":"+strconv.Itoa(i+1)+": "+target+": no file "+dest)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				broken = append(broken, path+":"+strconv.Itoa(i+1)+": "+target+": an anchor into a file that is not Markdown")
				continue
			}
			text, err := os.ReadFile(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(text))[anchor] {
				broken = append(broken, path+":"+strconv.Itoa(i+1)+": "+target+": "+dest+" has no heading #"+anchor)
			}
		}
	}
	return broken
}

// TestDocLinksResolve: every relative link in README.md, SECURITY.md and docs/*.md names a
// file or directory of the repository, and every "#anchor" a heading of the page it points
// into (GitHub's anchors: lowercase, spaces to '-', punctuation removed).
func TestDocLinksResolve(t *testing.T) {
	for _, page := range docPages(t) {
		for _, b := range brokenLinks(t, page) {
			t.Error(b)
		}
	}
}

// TestDocLinksSeeBrokenLinks: the checker of TestDocLinksResolve sees each kind of broken
// link, and takes a good one, on a page written for it.
func TestDocLinksSeeBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("sub/other.md", "# Other\n\n## What a failure leaves\n\n## Promises\n\n## Promises\n")
	page := write("page.md", strings.Join([]string{
		"# Page", "",
		"## Running `highly` available!", "",
		"[ok](sub/other.md) [ok](sub/other.md#what-a-failure-leaves) [ok](#running-highly-available)",
		"[ok](sub/other.md#promises-1) [ok](https://example.com/x#y) [ok](sub) `[not a link](nowhere.md)`",
		"[gone](sub/gone.md)",
		"[no heading](sub/other.md#what-a-failure-leaves-1)",
		"[no heading here](#using-it)",
		"```sh", "[in code](nowhere.md)", "# not a heading", "```",
		"[code heading](#not-a-heading)",
	}, "\n"))
	got := brokenLinks(t, page)
	want := []string{"sub/gone.md", "sub/other.md#what-a-failure-leaves-1", "#using-it", "#not-a-heading"}
	if len(got) != len(want) {
		t.Fatalf("got %d broken links, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(got[i], ": "+w+": ") {
			t.Errorf("broken link %d: got %q, want one about %s", i+1, got[i], w)
		}
	}
}

// modulePackages returns the directories of the module's packages, as `go list ./...` lists
// them ("orchestrator" for the module root): every directory holding a .go file, except
// testdata, hidden ones and nested modules (bench/).
func modulePackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			dir := filepath.ToSlash(filepath.Dir(path))
			if dir == "." {
				dir = "orchestrator"
			}
			if !slices.Contains(pkgs, dir) {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pkgs)
	return pkgs
}

// TestArchitectureMapIsComplete: docs/architecture.md's package map has one line for every
// package of the module, and no line for a package that is gone.
func TestArchitectureMapIsComplete(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)`")
	var mapped []string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		if slices.Contains(mapped, m[1]) {
			t.Errorf("docs/architecture.md maps %s twice", m[1])
		}
		mapped = append(mapped, m[1])
	}
	pkgs := modulePackages(t)
	for _, p := range pkgs {
		if !slices.Contains(mapped, p) {
			t.Errorf("docs/architecture.md's package map has no line for %s", p)
		}
	}
	for _, m := range mapped {
		if !slices.Contains(pkgs, m) {
			t.Errorf("docs/architecture.md's package map has a line for %s, which is no package of the module", m)
		}
	}
}

// TestCommentLinksToDocsResolve: what the code and the sample files cite of the
// documentation exists. Every "docs/<page>.md" they name is a page of docs/, and a section
// quoted after it (docs/architecture.md, "The two phases") is a heading of that page; no
// file cites the design or style notes that live outside the repository.
func TestCommentLinksToDocsResolve(t *testing.T) {
	outside := []string{"DESIGN" + ".md", "STYLE" + ".md"}
	// A citation, with the comment markers of a line break inside it taken out first.
	cite := regexp.MustCompile(`docs/([a-z0-9-]+\.md)(?:, "([^"]+)")?`)
	wrap := regexp.MustCompile(`\n[ \t]*(//|#)[ \t]*`)
	texts := map[string]bool{".go": true, ".yaml": true, ".yml": true, ".sh": true, ".md": true, ".example": true}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || path == filepath.Join("bench", "out")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !texts[filepath.Ext(path)] && d.Name() != "Makefile" && d.Name() != "Dockerfile" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		for _, o := range outside {
			if strings.Contains(text, o) {
				t.Errorf("%s cites %s, which is not in the repository (cite docs/architecture.md)", path, o)
			}
		}
		if filepath.Ext(path) == ".md" {
			return nil // the pages' own links are TestDocLinksResolve's
		}
		for _, m := range cite.FindAllStringSubmatch(wrap.ReplaceAllString(text, " "), -1) {
			page := filepath.Join("docs", m[1])
			pb, err := os.ReadFile(page)
			if err != nil {
				t.Errorf("%s cites %s, which does not exist", path, page)
				continue
			}
			if m[2] == "" {
				continue
			}
			if !anchors(string(pb))[anchorOf(m[2])] {
				t.Errorf("%s cites %s, %q: no such heading there", path, page, m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// anchorOf is the anchor GitHub gives a heading of text s.
func anchorOf(s string) string {
	for a := range anchors("# " + s) {
		return a
	}
	return ""
}

// TestREADMEPromisesAreTheGuarantees: the promises the README lists in short are, word for
// word, the titles of docs/guarantees.md's promises, in its order.
func TestREADMEPromisesAreTheGuarantees(t *testing.T) {
	title := regexp.MustCompile(`(?ms)^ {0,3}(\d+)\. \*\*(.+?)\*\*`)
	titles := func(path, section string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if section != "" {
			i := strings.Index(s, "\n"+section+"\n")
			if i < 0 {
				t.Fatalf("%s has no %q", path, section)
			}
			s = s[i+1:]
			if j := strings.Index(s[len(section):], "\n## "); j >= 0 {
				s = s[:len(section)+j]
			}
		}
		var out []string
		for _, m := range title.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1]+". "+strings.Join(strings.Fields(m[2]), " "))
		}
		return out
	}
	readme, guarantees := titles("README.md", "## Guarantees"), titles(filepath.Join("docs", "guarantees.md"), "## Promises")
	if len(guarantees) == 0 {
		t.Fatal("docs/guarantees.md: no promises found")
	}
	if !slices.Equal(readme, guarantees) {
		t.Errorf("README's promises differ from docs/guarantees.md's:\nREADME:\n%s\ndocs/guarantees.md:\n%s",
			strings.Join(readme, "\n"), strings.Join(guarantees, "\n"))
	}
}
