package httpapi

import "context"

// contextWithDrain is parent, also cancelled when drain ends.
func contextWithDrain(parent, drain context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(drain, cancel)
	return ctx, func() { stop(); cancel() }
}
