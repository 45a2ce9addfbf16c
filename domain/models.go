package domain

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"

	"github.com/oar/relay/provider"
)

func normModel(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer(".", "", "-", "", "_", "").Replace(s)
}

// checkModel applies R7.13 for provider p; nothing ends the error sentence.
// It returns a modelNote when the model could not be checked.
func (r *Relay) checkModel(p provider.Info, model, nothing string, create bool) (string, *Error) {
	if model == "" {
		return "", nil
	}
	if e := r.checkNotFlag(p, "{model}", "model", model, nothing); e != nil {
		return "", e
	}
	if len(p.Models) == 0 {
		return fmt.Sprintf("Relay %q has no model list for %s yet; %q was passed on unchecked.", r.opts.Name, p.Name, model), nil
	}
	for _, m := range p.Models {
		if m == model {
			return "", nil
		}
	}
	if p.ModelsDiscovered {
		// R17.6: the list is what the endpoint reported last; a model added
		// since is not yet known, not wrong.
		return fmt.Sprintf("%q is not among the models %s listed when the relay last asked; it was passed on unchecked.", model, p.Name), nil
	}
	type cand struct {
		id string
		d  int
	}
	var cands []cand
	nm := normModel(model)
	for _, m := range p.Models {
		d := levenshtein.ComputeDistance(nm, normModel(m))
		if d <= 2 || d*3 <= len(nm) {
			cands = append(cands, cand{m, d})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].d < cands[j].d })
	sugg := []string{}
	for _, c := range cands {
		sugg = append(sugg, c.id)
	}
	msg := fmt.Sprintf("Unknown model '%s' for %s on relay %q", model, p.Name, r.opts.Name)
	if len(sugg) > 0 {
		msg += fmt.Sprintf("; did you mean '%s'?", sugg[0])
	} else {
		msg += "."
	}
	msg += fmt.Sprintf(" Valid ids: %s. %s", strings.Join(p.Models, ", "), nothing)
	e := Errorf(CodeUnknownModel, "%s", msg).With("suggestions", sugg).With("models", p.Models)
	// create_session: the id of the one other provider that has it answers
	// with that provider's code, also when it is another spelling of one of
	// this provider's ids (Copilot's claude-opus-5.5 for Claude's
	// claude-opus-5-5): a session never switches provider because of a
	// model name, so the agent must pass that provider.
	if create {
		var owners []string
		for _, id := range r.providerIDs() {
			if id == p.ID {
				continue
			}
			for _, m := range r.providers[id].Info().Models {
				if m == model {
					owners = append(owners, id)
				}
			}
		}
		if len(owners) == 1 {
			e.Msg = strings.TrimSuffix(e.Msg, " "+nothing) + fmt.Sprintf(" Provider %q offers '%s': pass provider %q. %s", owners[0], model, owners[0], nothing)
			return "", e.With("remoteCode", remoteName(owners[0])+"_PROVIDER_REQUIRED")
		}
	}
	// Another spelling of one of this provider's ids: the closest match.
	for _, m := range p.Models {
		if normModel(m) == nm {
			return "", e.With("remoteCode", remoteName(p.ID)+"_MODEL_UNAVAILABLE")
		}
	}
	return "", e
}

func (r *Relay) checkEffort(p provider.Info, effort, nothing string) *Error {
	if effort == "" {
		return nil
	}
	if e := r.checkNotFlag(p, "{effort}", "effort", effort, nothing); e != nil {
		return e
	}
	if len(p.Efforts) == 0 {
		return nil
	}
	for _, x := range p.Efforts {
		if x == effort {
			return nil
		}
	}
	return Errorf(CodeInvalidInput, "Unknown effort %q for %s; valid: %s. %s", effort, p.Name, strings.Join(p.Efforts, ", "), nothing)
}

func checkMode(mode, nothing string) *Error {
	if mode == "" || validMode(mode) {
		return nil
	}
	return Errorf(CodeInvalidInput, "mode must be agent, ask or plan (got %q). %s", mode, nothing)
}

func (r *Relay) provider(id, nothing string) (provider.Provider, *Error) {
	p, ok := r.providers[id]
	if !ok {
		return nil, Errorf(CodeInvalidInput, "Relay %q has no provider %q; providers: %s. %s", r.opts.Name, id, strings.Join(r.providerIDs(), ", "), nothing)
	}
	return p, nil
}

// flagChecker is a provider that passes values on its command line (exec).
type flagChecker interface {
	ValueBecomesFlag(placeholder, value string) bool
}

// checkNotFlag refuses a model or effort that would become an option of the
// provider's command (it starts with "-" and is put for a placeholder that
// no "--" precedes).
func (r *Relay) checkNotFlag(p provider.Info, placeholder, what, value, nothing string) *Error {
	fc, ok := r.providers[p.ID].(flagChecker)
	if !ok || !fc.ValueBecomesFlag(placeholder, value) {
		return nil
	}
	return Errorf(CodeInvalidInput, "%s %q starts with \"-\": %s passes it to its command as an argument, where it would become an option. %s",
		what, value, p.Name, nothing)
}
