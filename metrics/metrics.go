// Package metrics holds the relay's Prometheus collectors in one registry
// (relay_ prefix, base units, bounded labels only: never a session id).
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// QueueStat is one asynq queue's state at scrape time.
type QueueStat struct {
	Queue   string
	Pending int
	Active  int
	Retry   int
	Latency time.Duration // age of the oldest pending task
}

// Metrics is the relay's registry and collectors.
type Metrics struct {
	Registry *prometheus.Registry

	toolCalls     *prometheus.CounterVec
	toolDuration  *prometheus.HistogramVec
	turnsStarted  *prometheus.CounterVec
	turnsFinished *prometheus.CounterVec
	turnDuration  *prometheus.HistogramVec
	cards         *prometheus.CounterVec
	httpRequests  *prometheus.CounterVec
	events        *prometheus.CounterVec
	deliveries    *prometheus.CounterVec
	peerRequests  *prometheus.CounterVec
	notifyFailed  prometheus.Counter
	webhooks      *prometheus.CounterVec // relay_notify_webhook_total{result} (R23.10)
}

// New builds the registry with the Go and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_tool_calls_total",
			Help: "relay_tool calls by action and result code (ok on success)."}, []string{"action", "code"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "relay_tool_call_duration_seconds",
			Help: "Duration of relay_tool calls, waits included.", Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 600, 3600}},
			[]string{"action"}),
		turnsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_turns_started_total",
			Help: "Turns started, by provider."}, []string{"provider"}),
		turnsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_turns_finished_total",
			Help: "Turns finished, by provider and status (done, error, stopped)."}, []string{"provider", "status"}),
		turnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "relay_turn_duration_seconds",
			Help: "Duration of turns from start to end.", Buckets: []float64{.01, .05, .1, .5, 1, 5, 30, 120, 600, 3600}},
			[]string{"provider"}),
		cards: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_cards_total",
			Help: "Approval cards by status (asked, allow, deny, timeout, withdrawn)."}, []string{"status"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_http_requests_total",
			Help: "HTTP requests by route kind and status class."}, []string{"kind", "status"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_events_total",
			Help: "Events emitted, by kind."}, []string{"kind"}),
		peerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_peer_requests_total",
			Help: "Requests to paired relays by kind (call, events, hello, inbox) and code (ok, or the error code: REMOTE_RELAY_OFFLINE, REMOTE_RELAY_AUTH, …); polls are kind events."},
			[]string{"kind", "code"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_deliveries_total",
			Help: "Event deliveries by kind: message and summary are wakes of a watcher (summary = wake-limit summary); digest_release and quiet_release are held events released by a digest or the end of quiet hours."},
			[]string{"kind"}),
		notifyFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "relay_notify_failures_total",
			Help: "Notifications of the owner's console that were not sent (the change itself was made; an open page shows it with its next update or a reload)."}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_notify_webhook_total",
			Help: "Owner notifications sent to the config's webhooks (R23.10), by result: delivered, retry (a try failed, another follows), failed (every try failed), dropped (the queue was full)."},
			[]string{"result"}),
	}
	reg.MustRegister(m.toolCalls, m.toolDuration, m.turnsStarted, m.turnsFinished, m.turnDuration, m.cards, m.httpRequests,
		m.events, m.deliveries, m.peerRequests, m.notifyFailed, m.webhooks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ToolCall counts one relay_tool call.
func (m *Metrics) ToolCall(action, code string, d time.Duration) {
	m.toolCalls.WithLabelValues(action, code).Inc()
	m.toolDuration.WithLabelValues(action).Observe(d.Seconds())
}

// TurnStarted counts a turn start.
func (m *Metrics) TurnStarted(provider string) { m.turnsStarted.WithLabelValues(provider).Inc() }

// TurnFinished counts a turn end.
func (m *Metrics) TurnFinished(provider, status string, d time.Duration) {
	m.turnsFinished.WithLabelValues(provider, status).Inc()
	m.turnDuration.WithLabelValues(provider).Observe(d.Seconds())
}

// CardDecided counts a card event.
func (m *Metrics) CardDecided(status string) { m.cards.WithLabelValues(status).Inc() }

// Event counts an emitted event.
func (m *Metrics) Event(kind string) { m.events.WithLabelValues(kind).Inc() }

// Delivery counts a delivery step (message, summary, digest_release, quiet_release).
func (m *Metrics) Delivery(kind string) { m.deliveries.WithLabelValues(kind).Inc() }

// PeerRequest counts one request to a paired relay (code "ok" or an error code).
func (m *Metrics) PeerRequest(kind, code string) { m.peerRequests.WithLabelValues(kind, code).Inc() }

// NotifyFailed counts one notification of the owner's console not sent.
func (m *Metrics) NotifyFailed() { m.notifyFailed.Inc() }

// WebhookResult counts one outcome of a webhook delivery (R23.10; package webhook's results).
func (m *Metrics) WebhookResult(result string) { m.webhooks.WithLabelValues(result).Inc() }

// HTTPRequest counts one HTTP request; kind is mcp, api, peer, metrics or health.
func (m *Metrics) HTTPRequest(kind string, status int) {
	m.httpRequests.WithLabelValues(kind, statusClass(status)).Inc()
}

func statusClass(s int) string {
	switch {
	case s >= 500:
		return "5xx"
	case s >= 400:
		return "4xx"
	case s >= 300:
		return "3xx"
	default:
		return "2xx"
	}
}

// AddGauge registers a gauge whose value is read at scrape time.
func (m *Metrics) AddGauge(name, help string, f func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// AddQueues registers the asynq queue collector.
func (m *Metrics) AddQueues(f func() []QueueStat) {
	m.Registry.MustRegister(&queueCollector{f: f})
}

var (
	queueDepthDesc = prometheus.NewDesc("relay_queue_tasks", "Tasks in an asynq queue by state.", []string{"queue", "status"}, nil)
	queueLatDesc   = prometheus.NewDesc("relay_queue_latency_seconds", "Age of the oldest pending task of an asynq queue.", []string{"queue"}, nil)
)

type queueCollector struct{ f func() []QueueStat }

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- queueLatDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.f() {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(q.Pending), q.Queue, "pending")
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(q.Active), q.Queue, "active")
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(q.Retry), q.Queue, "retry")
		ch <- prometheus.MustNewConstMetric(queueLatDesc, prometheus.GaugeValue, q.Latency.Seconds(), q.Queue)
	}
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
