// Package fault is meshnode's error model: the thirteen error kinds of the zlink
// Framework Error Model (NotFound, AlreadyExists, ..., InternalFailure), each a sentinel
// error with its wire code (the "code" of a STREAM Error payload), and the errors of
// every meshnode package are classified by one of them.
//
// A package's own sentinel is made with New and wraps its kind, so errors.Is finds
// both:
//
//	var ErrBackpressure = fault.New(fault.Unavailable, "mesh: peer queue full")
//	errors.Is(err, mesh.ErrBackpressure) // the precise cause
//	errors.Is(err, fault.Unavailable)    // the class
//
// Code(err) is the wire code of the first kind found in err's chain, so a session
// handler that returns an error gets the right Error reply code without a mapping of
// its own.
package fault
