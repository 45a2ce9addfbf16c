package relaytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The load of the fault and failover tests (a relay that loses its Redis, a
// master killed under load): owner prompts into each session every 250–550
// ms, a third of them sleeping 200–900 ms, from the start until the test
// stops it; each prompt kept with what the API answered.

// loadPrompt is one owner prompt the load (or a test's probe) sent.
type loadPrompt struct {
	text   string
	id     string    // message (turn) id when accepted
	status int       // HTTP status; 0 = transport error
	code   string    // the refusal's code
	err    string    // the refusal's body, or the transport error
	phase  int       // the test's phase when it was sent (the outage's, the kill it came after)
	at     time.Time // when its answer (or its transport error) came
}

// postPrompt posts text as an owner prompt into session sid of the relay at
// url; accepted is a 2xx answer with a message id.
func postPrompt(client *http.Client, url, sid, text string) (p loadPrompt) {
	p.text = text
	defer func() { p.at = time.Now() }()
	body, _ := json.Marshal(map[string]any{"text": text})
	req, err := http.NewRequest("POST", url+"/api/v1/sessions/"+sid+"/messages", strings.NewReader(string(body)))
	if err != nil {
		p.err = err.Error()
		return p
	}
	req.Header.Set("Authorization", "Bearer "+OwnerToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		p.err = err.Error()
		return p
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	p.status = resp.StatusCode
	if id, _ := out["message_id"].(string); resp.StatusCode/100 == 2 && id != "" {
		p.id = id
	} else {
		p.code, _ = out["code"].(string)
		p.err = strings.TrimSpace(string(data))
	}
	return p
}

// promptLoad is the load on a set of sessions.
type promptLoad struct {
	sessions []Session
	post     func(sid, text string) loadPrompt
	phase    func() int // the phase a prompt is sent in, 0 … phases-1

	sent       [][]loadPrompt // per session, in order: read once the load ended
	acceptedIn []atomic.Int64 // prompts accepted in each phase, as they are
}

// start starts one sender per session, counted in wg, until stop closes.
func (l *promptLoad) start(phases int, stop <-chan struct{}, wg *sync.WaitGroup) {
	l.sent = make([][]loadPrompt, len(l.sessions))
	l.acceptedIn = make([]atomic.Int64, phases)
	for i := range l.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.send(i, stop)
		}()
	}
}

// send is session i's sender: tags s<i>-p<n> in order.
func (l *promptLoad) send(i int, stop <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		tag := fmt.Sprintf("s%d-p%d", i, n)
		text := Script(stepReply(tag))
		if (i+n)%3 == 0 {
			text = Script(stepSleep(200+100*((i+n)%8)), stepReply(tag))
		}
		ph := l.phase()
		p := l.post(l.sessions[i].ID, text)
		p.phase = ph
		if p.id != "" {
			l.acceptedIn[ph].Add(1)
		}
		l.sent[i] = append(l.sent[i], p)
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(250+(i*37+n*53)%300) * time.Millisecond):
		}
	}
}
