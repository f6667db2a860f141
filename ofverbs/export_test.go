package ofverbs

// Handles of no object, for the external tests' error checks
// (daemon_test.go TestDaemonErrorsKeepErrno): what a client that forged or
// borrowed a handle would send.

// ForgedQP is a QP value of context c with handle h that c never created.
func ForgedQP(c *Context, h uint32) *QP { return &QP{ctx: c, handle: h} }

// ForgedPD is a PD value of context c with handle h that c never created.
func ForgedPD(c *Context, h uint32) *PD { return &PD{ctx: c, handle: h} }
