package app

// httpService returns the metrics/health HTTP server, or nil when off.
func (a *App) httpService() service { return nil }
