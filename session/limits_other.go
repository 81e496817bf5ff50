//go:build !unix

package session

func openFilesLimit() int { return 0 }
