# StarVZ's phase 1 and phase 2 on a directory of phase-1 inputs (`testbed trace-starvz` output, or
# StarVZ's own inst/extdata/lu_trace): which panels draw something. bench/RESULTS.md, "StarVZ draws
# numasim's runtime tables", says how its output for a numasim run was measured.
#
#   Rscript bench/starvz_check.R LIB DIR [CONFIG.yaml] [OUT.png]
#
# CONFIG `-`: the default below. LIB: an R library with StarVZ (schnorr/starvz) and data.tree installed (`R CMD INSTALL -l LIB`);
# StarVZ is not part of the repository. Phase 1 writes its tables with the arrow package, which
# Debian does not package: the tables are kept in memory instead (starvz_write_parquet and
# check_arrow replaced in StarVZ's namespace), then turned into a starvz_data object as
# starvz_read would (table names as str_to_title of the file names). CONFIG: a StarVZ configuration
# (default: DIR/config.yaml if there, else StarVZ's defaults). Prints one line per panel of
# starvz_plot_list that reads trace tables: its name, `off` (not in the configuration), `content`
# (a layer with rows), `blank` or `error: ...`, and the rows of its layers; OUT.png gets
# starvz_plot's assembled figure when given. Exit status 0 when every panel the configuration turns
# on draws content, 1 when one is blank or fails (the last line names them).
args <- commandArgs(trailingOnly = TRUE)
if (length(args) < 2) stop("usage: Rscript bench/starvz_check.R LIB DIR [CONFIG.yaml] [OUT.png]")
.libPaths(c(args[1], .libPaths()))
suppressPackageStartupMessages({
  library(starvz)
  library(ggplot2)
})
directory <- args[2]
config_file <- if (length(args) >= 3 && args[3] != "-") args[3] else NULL
out_png <- if (length(args) >= 4) args[4] else NULL

ns <- asNamespace("starvz")
tables <- new.env()
keep <- function(data, directory = ".") {
  for (n in setdiff(names(data), "Origin")) {
    if (is.data.frame(data[[n]])) tables[[stringr::str_to_title(tolower(n))]] <- data[[n]]
  }
  invisible(NULL)
}
for (f in c("starvz_write_parquet", "check_arrow")) {
  unlockBinding(f, ns)
  assign(f, if (f == "check_arrow") function() invisible(TRUE) else keep, envir = ns)
}

starvz_phase1(directory = directory, whichApplication = "lu", config_file = config_file)
data <- as.list(tables)
data$Origin <- directory
data$config <- if (is.null(config_file)) {
  starvz_read_config(file.path(directory, "config.yaml"), warn = FALSE)
} else {
  starvz_read_config(config_file)
}
data <- ns$starvz_data(data)
cat("tables:", paste(sort(setdiff(names(data), c("Origin", "config"))), collapse = " "), "\n")
for (n in c("Application", "Starpu", "Link", "Variable", "Comm_state", "Memory_state", "Other_state",
            "Events_memory", "Y")) {
  cat(sprintf("rows %-14s %d\n", n, if (is.null(data[[n]])) 0L else nrow(data[[n]])))
}

# starvz_plot_list's panels (R/phase2.R), each drawn on its own: one that fails does not hide the others
panel_functions <- list(
  st = c("st", "panel_st"), st_mm = c("memory$state", "panel_memory_state"),
  starpu = c("starpu", "panel_st_runtime"), ijk = c("kiteration", "panel_kiteration"),
  lackready = c("lackready", "panel_lackready"), ready = c("ready", "panel_ready"),
  submitted = c("submitted", "panel_submitted"), memory = c("usedmemory", "panel_usedmemory"),
  mpi = c("mpibandwidth", "panel_mpibandwidth"), mpiconc = c("mpiconcurrent", "panel_mpiconcurrent"),
  mpiconcout = c("mpiconcurrentout", "panel_mpiconcurrentout"), mpistate = c("mpistate", "panel_mpistate"),
  gpu = c("gpubandwidth", "panel_gpubandwidth")
)
undrawn <- character()
for (name in names(panel_functions)) {
  key <- strsplit(panel_functions[[name]][1], "$", fixed = TRUE)[[1]]
  if (!isTRUE(Reduce(function(x, k) x[[k]], c(key, "active"), data$config))) {
    cat(sprintf("panel %-12s off\n", name))
    next
  }
  built <- tryCatch(ggplot_build(ns[[panel_functions[[name]][2]]](data)), error = function(e) e)
  if (inherits(built, "error")) {
    cat(sprintf("panel %-12s error: %s\n", name, gsub("\n", " ", conditionMessage(built))))
    undrawn <- c(undrawn, name)
    next
  }
  rows <- vapply(built$data, nrow, integer(1))
  cat(sprintf("panel %-12s %s %s\n", name, if (any(rows > 0)) "content" else "blank",
              paste(rows, collapse = "+")))
  if (!any(rows > 0)) undrawn <- c(undrawn, name)
}
if (!is.null(out_png)) {
  fig <- tryCatch(starvz_plot(data), error = function(e) {
    cat("starvz_plot: error:", conditionMessage(e), "\n")
    NULL
  })
  if (!is.null(fig)) {
    ggsave(out_png, fig, width = 14, height = 40, dpi = 50, limitsize = FALSE)
    cat("wrote", out_png, "\n")
  }
}
if (length(undrawn) > 0) {
  cat("panels turned on that draw nothing or fail:", paste(undrawn, collapse = " "), "\n")
  quit(status = 1)
}
