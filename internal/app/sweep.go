package app

// sweeperService returns the sweeper to run inside `run`, or nil.
func (a *App) sweeperService() service { return nil }
