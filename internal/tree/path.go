package tree

import (
	"fmt"
	"strings"

	"github.com/meridian-coord/meridian/internal/errs"
)

// ValidatePath applies ZooKeeper's PathUtils.validatePath: an absolute path,
// no trailing '/' (except the root), no empty, "." or ".." components, and
// none of the characters ZooKeeper refuses. For a sequential create the path
// is checked as if the sequence suffix were already appended, so "/a/" is
// accepted there. Paths longer than MaxPathBytes are refused as well.
//
// Unlike ZooKeeper (whose ".." check never fires because of a bug) ".." is
// rejected, as ZooKeeper's documentation says it is.
func ValidatePath(path string, sequential bool) error {
	if PathProblem(path, sequential) != "" {
		return errs.ErrInvalidPath
	}
	return nil
}

// PathProblem says what is wrong with path by ValidatePath's rules, or
// returns "" when nothing is. It is for messages after a refusal (the
// server answers with the bare errs.ErrInvalidPath); ValidatePath is the
// check.
func PathProblem(path string, sequential bool) string {
	if len(path) == 0 || path[0] != '/' {
		return "a path must start with /"
	}
	if len(path) > MaxPathBytes {
		return fmt.Sprintf("a path may have at most %d bytes", MaxPathBytes)
	}
	if sequential {
		// ZooKeeper validates path+"1": the suffix becomes part of the last
		// component, so an empty, "." or ".." last component is fine.
		path += "1"
	}
	if path == "/" {
		return ""
	}
	if path[len(path)-1] == '/' {
		return "a path may not end with /"
	}
	start := 1
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		switch path[start:i] {
		case "":
			return "a path may not contain an empty component (//)"
		case ".", "..":
			return "a path may not contain . or .. components"
		}
		start = i + 1
	}
	for _, r := range path {
		if badPathRune(r) {
			return fmt.Sprintf("a path may not contain the character %U", r)
		}
	}
	return ""
}

// badPathRune reports the characters ZooKeeper forbids. Java checks UTF-16
// code units, so every rune above U+FFFF (a surrogate pair there) is refused
// too, and so is invalid UTF-8 (decoded as U+FFFD, inside U+FFF0-U+FFFF).
func badPathRune(r rune) bool {
	return r <= 0x1f || (r >= 0x7f && r <= 0x9f) ||
		(r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0
}

// parentOf returns the parent of a validated path; the root is its own parent.
func parentOf(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

// baseName returns the last component of a validated path.
func baseName(path string) string {
	return path[strings.LastIndexByte(path, '/')+1:]
}

// protected reports whether path is the reserved "/zookeeper" subtree, which
// clients may read but not modify.
func protected(path string) bool {
	return path == "/zookeeper" || strings.HasPrefix(path, "/zookeeper/") || Reserved(path)
}

// ReservedRoot is where Meridian shows its own state (locks) to ZooKeeper
// clients as read-only znodes; no client write may touch it.
const ReservedRoot = "/meridian"

// Reserved reports whether path is ReservedRoot or below it.
func Reserved(path string) bool {
	return path == ReservedRoot || strings.HasPrefix(path, ReservedRoot+"/")
}
