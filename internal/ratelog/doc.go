// Package ratelog logs a recurring cause once per interval: a hostile client or a broken
// peer can repeat the same bad input thousands of times a second, and the log must stay
// readable (one line per cause per interval, with how many were suppressed since). A
// Limiter (the zero value is ready) decides with Allow and logs with Log, or with LogFunc
// where building the line's fields costs more than a suppressed occurrence should.
package ratelog
