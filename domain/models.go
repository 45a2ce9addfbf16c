package domain

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"

	"github.com/oar/relay/provider"
)

// models are the relay's providers as the actions check what an agent or
// the owner names of them: a provider by id, in config order (ids), a model
// checked against its provider's list with a suggestion or the provider that
// offers it (R7.13), an effort against its efforts, and a model or effort
// that would become an option of an exec provider's command refused
// (R11.2). create_session, update_session, send and the owner's sessions
// check through it; it holds no store.
type models struct {
	opts      *Options                     // the relay's: name
	providers map[string]provider.Provider // the relay's, read-only after New
	order     []string                     // provider ids in config order
}

// ids lists the providers in config order.
func (md *models) ids() []string {
	out := append([]string(nil), md.order...)
	if len(out) == 0 {
		for id := range md.providers {
			out = append(out, id)
		}
		sort.Strings(out)
	}
	return out
}

func normModel(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer(".", "", "-", "", "_", "").Replace(s)
}

// checkModel applies R7.13 for provider p; nothing ends the error sentence.
// It returns a modelNote when the model could not be checked.
func (md *models) checkModel(p provider.Info, model, nothing string, create bool) (string, *Error) {
	if model == "" {
		return "", nil
	}
	if e := md.checkNotFlag(p, "{model}", "model", model, nothing); e != nil {
		return "", e
	}
	if len(p.Models) == 0 {
		return fmt.Sprintf("Relay %q has no model list for %s yet; %q was passed on unchecked.", md.opts.Name, p.Name, model), nil
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
	msg := fmt.Sprintf("Unknown model '%s' for %s on relay %q", model, p.Name, md.opts.Name)
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
		owners := md.owners(p.ID, model)
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

// owners are the providers other than except that list model, in config
// order; a billing partner (switch_to, R7.8) of one listed already is not a
// second owner (R24.6): claude and claude-api both listing an id make one
// owner, the first of them.
func (md *models) owners(except, model string) []string {
	var owners []string
	for _, id := range md.ids() {
		in := md.providers[id].Info()
		if id == except || !contains(in.Models, model) {
			continue
		}
		partnered := false
		for _, o := range owners {
			partnered = partnered || in.SwitchTo == o || md.providers[o].Info().SwitchTo == id
		}
		if !partnered {
			owners = append(owners, id)
		}
	}
	return owners
}

func (md *models) checkEffort(p provider.Info, effort, nothing string) *Error {
	if effort == "" {
		return nil
	}
	if e := md.checkNotFlag(p, "{effort}", "effort", effort, nothing); e != nil {
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

func (md *models) provider(id, nothing string) (provider.Provider, *Error) {
	p, ok := md.providers[id]
	if !ok {
		return nil, Errorf(CodeInvalidInput, "Relay %q has no provider %q; providers: %s. %s", md.opts.Name, id, strings.Join(md.ids(), ", "), nothing)
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
func (md *models) checkNotFlag(p provider.Info, placeholder, what, value, nothing string) *Error {
	fc, ok := md.providers[p.ID].(flagChecker)
	if !ok || !fc.ValueBecomesFlag(placeholder, value) {
		return nil
	}
	return Errorf(CodeInvalidInput, "%s %q starts with \"-\": %s passes it to its command as an argument, where it would become an option. %s",
		what, value, p.Name, nothing)
}
