//go:build !unix

package render

// setDataLimit has no system cap here; the heap goal set by capMemory and
// the render's deadline still apply.
func setDataLimit(int64) {}
