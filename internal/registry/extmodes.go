package registry

import (
	"context"

	"github.com/macpd/macpd/internal/coord"
	"github.com/macpd/macpd/internal/mode"
	"github.com/macpd/macpd/internal/mode/passthrough"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"google.golang.org/protobuf/proto"
)

// Registered extension modes are stored durably (codec.go) before a
// registration is acknowledged, so their sessions survive a restart.
// Unregistered modes stay stored as retired: sessions bound to them still
// replay, and the name can only be registered again with the identical
// descriptor.
const (
	modeActive   = ModeActive
	modeStandard = ModeStandard
	modeRetired  = ModeRetired
)

func (r *Registry) persistMode(state ModeState, d *macpv1.ModeDescriptor) *coord.Error {
	b, err := EncodeMode(state, d)
	if err != nil {
		return coord.Errorf(coord.CodeInternalError, "encoding mode descriptor")
	}
	if err := r.store.PutMeta(context.Background(), ModeKey(d.Mode), b); err != nil {
		r.log.Error("storing mode registration failed", "mode", d.Mode, "err", err)
		return coord.Errorf(coord.CodeInternalError, "the mode registration could not be stored")
	}
	return nil
}

// loadModes restores durable registrations at boot.
func (r *Registry) loadModes(ctx context.Context) error {
	reg, retired, err := LoadModes(ctx, r.store, r.modes.Load())
	if err != nil {
		return err
	}
	for id, e := range retired {
		r.retired[id] = e
	}
	r.modes.Store(reg)
	return nil
}

// Extension-mode lifecycle (RFC-MACP-0002 §12, RFC-MACP-0006 §3.6). Every
// change swaps the registry atomically and notifies WatchModeRegistry.
// Sessions already started keep the mode value they were bound to.

func mayManage(id coord.Identity) *coord.Error {
	if !id.Caps.CanManageModeRegistry {
		return coord.Errorf(coord.CodeForbidden, "%s may not manage the mode registry", id.Sender)
	}
	return nil
}

// RegisterExtMode registers a passthrough extension mode.
func (r *Registry) RegisterExtMode(id coord.Identity, d *macpv1.ModeDescriptor) *coord.Error {
	if err := mayManage(id); err != nil {
		return err
	}
	if err := r.checkDescriptorSize("mode", d); err != nil { // limits.go
		return err
	}
	nd, err := passthrough.Validate(d)
	if err != nil {
		return coord.AsError(err)
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	reg := r.modes.Load()
	if _, exists := reg.Lookup(nd.Mode); exists {
		return coord.Errorf(coord.CodeInvalidEnvelope, "mode %q is already registered", nd.Mode)
	}
	if err := r.checkExtModeRoom(reg, nd); err != nil { // limits.go
		return err
	}
	if old, was := r.retired[nd.Mode]; was && !proto.Equal(old.Mode.Descriptor(), nd) {
		return coord.Errorf(coord.CodeInvalidEnvelope,
			"mode %q was registered before with another descriptor and still has stored sessions; choose a new name", nd.Mode)
	}
	if err := r.persistMode(modeActive, nd); err != nil {
		return err
	}
	delete(r.retired, nd.Mode)
	r.SetModes(reg.With(mode.Entry{Mode: passthrough.New(nd), Kind: mode.Extension}))
	r.log.Info("extension mode registered", "mode", nd.Mode, "by", id.Sender)
	return nil
}

// UnregisterExtMode removes a registered extension mode. Built-in and
// standards-track modes cannot be removed.
func (r *Registry) UnregisterExtMode(id coord.Identity, name string) *coord.Error {
	if err := mayManage(id); err != nil {
		return err
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	reg := r.modes.Load()
	e, ok := reg.Lookup(name)
	switch {
	case !ok:
		return coord.Errorf(coord.CodeModeNotSupported, "mode %q is not registered", name)
	case e.BuiltIn:
		return coord.Errorf(coord.CodeForbidden, "mode %q is built in and cannot be unregistered", name)
	case e.Kind == mode.Standard:
		return coord.Errorf(coord.CodeForbidden, "mode %q is standards-track and cannot be unregistered", name)
	}
	if err := r.persistMode(modeRetired, e.Mode.Descriptor()); err != nil {
		return err
	}
	r.retired[name] = e
	r.SetModes(reg.Without(name))
	r.log.Info("extension mode unregistered", "mode", name, "by", id.Sender)
	return nil
}

// PromoteMode makes an extension mode standards-track (listed by
// ListModes), optionally under a new name outside the reserved macp.mode.*
// namespace. It returns the mode's id after promotion.
func (r *Registry) PromoteMode(id coord.Identity, name, newName string) (string, *coord.Error) {
	if err := mayManage(id); err != nil {
		return "", err
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	reg := r.modes.Load()
	e, ok := reg.Lookup(name)
	switch {
	case !ok:
		return "", coord.Errorf(coord.CodeModeNotSupported, "mode %q is not registered", name)
	case e.Kind == mode.Standard:
		return "", coord.Errorf(coord.CodeInvalidEnvelope, "mode %q is already standards-track", name)
	}
	if newName == "" || newName == name {
		if !e.BuiltIn {
			if err := r.persistMode(modeStandard, e.Mode.Descriptor()); err != nil {
				return "", err
			}
		}
		e.Kind = mode.Standard
		r.SetModes(reg.With(e))
		return name, nil
	}
	if mode.IsStandardID(newName) {
		return "", coord.Errorf(coord.CodeForbidden, "promotion into the reserved macp.mode.* namespace needs publication in the MACP RFC repository")
	}
	if _, exists := reg.Lookup(newName); exists {
		return "", coord.Errorf(coord.CodeInvalidEnvelope, "mode %q is already registered", newName)
	}
	pt, isPassthrough := e.Mode.(*passthrough.Mode)
	if !isPassthrough {
		return "", coord.Errorf(coord.CodeForbidden, "built-in mode %q cannot be renamed", name)
	}
	d := pt.Descriptor()
	nd := &macpv1.ModeDescriptor{
		Mode: newName, ModeVersion: d.ModeVersion, Title: d.Title, Description: d.Description,
		DeterminismClass: d.DeterminismClass, ParticipantModel: d.ParticipantModel,
		MessageTypes: d.MessageTypes, TerminalMessageTypes: d.TerminalMessageTypes, SchemaUris: d.SchemaUris,
	}
	if err := r.persistMode(modeStandard, nd); err != nil {
		return "", err
	}
	if err := r.persistMode(modeRetired, d); err != nil {
		return "", err
	}
	r.retired[name] = e
	r.SetModes(reg.Without(name).With(mode.Entry{Mode: passthrough.New(nd), Kind: mode.Standard}))
	r.log.Info("extension mode promoted", "mode", name, "as", newName, "by", id.Sender)
	return newName, nil
}
