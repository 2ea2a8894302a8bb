/**
 * A notice in JupyterLab when one of the user's GPU jobs ends or gives way.
 *
 * The hub lists the user's jobs; this server's /gpuspawner/jobs route asks it with the
 * server's own token (see gpuspawner_lab/handlers.py), and this plugin polls that route.
 * The first answer is what the page found: jobs that had ended by then are not told of.
 * After it, a job that is done, failed or was cancelled, or that gave way to a person's
 * start, gets one notification, with the hub's reason and an action that opens what it
 * wrote (its executed notebook, or a script's log.txt). A job's own server, and a server
 * outside a hub, answer 404, and the poll stops.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';

interface IJob {
  id: number;
  state: string; // the hub's: waiting, starting, running, giving way, done, failed, cancelled
  file: string; // the notebook or script, from the home
  reason: string;
  preemptions: number; // how often it gave way, its present giving way not counted
  output: string | null; // what it wrote, from the server's root; null while there is none
}

const INTERVAL = 20_000;
// After a failed read the poll asks again this soon, then backs off, as the lease does.
const RETRY_INTERVAL = 5_000;
const ENDED = new Set(['done', 'failed', 'cancelled']);
const SHOWN_MS = 30_000; // how long a notice that needs nothing of the user stays up

async function readJobs(
  settings: ServerConnection.ISettings
): Promise<IJob[] | null> {
  const url = URLExt.join(settings.baseUrl, 'gpuspawner', 'jobs');
  const response = await ServerConnection.makeRequest(url, {}, settings);
  if (response.status === 404) {
    return null; // a job's own server, or none of a hub's: nothing to tell
  }
  const body = await response.json();
  if (!response.ok) {
    throw new Error(body.message || response.statusText);
  }
  return body.jobs as IJob[];
}

/** How often a job has given way, counting the one under way. */
function gaveWay(job: IJob): number {
  return job.preemptions + (job.state === 'giving way' ? 1 : 0);
}

function name(job: IJob): string {
  return job.file.split('/').pop() || `job ${job.id}`;
}

/** What each job was at the last read; what changed since is told. */
class Notices {
  constructor(private app: JupyterFrontEnd) {}

  update(jobs: IJob[]): void {
    const first = this.known === null;
    const known = this.known ?? new Map<number, IJob>();
    this.known = new Map(jobs.map(job => [job.id, job]));
    if (first) {
      return; // what had happened before the page loaded is not news
    }
    // newest first from the hub: told oldest first, so the newest notice is on top
    for (const job of [...jobs].reverse()) {
      const before = known.get(job.id);
      if (ENDED.has(job.state)) {
        if (!before || !ENDED.has(before.state)) {
          this.ended(job);
        }
      } else if (gaveWay(job) > (before ? gaveWay(before) : 0)) {
        this.notify(
          'warning',
          `${name(job)} gives way to a person's start: it will wait and run again`,
          job
        );
      }
    }
  }

  private ended(job: IJob): void {
    switch (job.state) {
      case 'done':
        this.notify('success', `${name(job)} is done`, job);
        break;
      case 'failed':
        this.notify('error', `${name(job)} failed`, job, false);
        break;
      default:
        this.notify('info', `${name(job)} was cancelled`, job);
    }
  }

  private notify(
    type: 'success' | 'error' | 'info' | 'warning',
    says: string,
    job: IJob,
    autoClose: number | false = SHOWN_MS
  ): void {
    const message = job.reason ? `GPU job ${says}: ${job.reason}` : `GPU job ${says}.`;
    const path = job.output;
    const actions: Notification.IAction[] = path
      ? [
          {
            label: path.endsWith('.ipynb') ? 'Open notebook' : 'Open log',
            caption: `Open ${path}`,
            callback: () => {
              void this.app.commands.execute('docmanager:open', { path });
            }
          }
        ]
      : [];
    Notification.emit(message, type, { autoClose, actions });
  }

  private known: Map<number, IJob> | null = null;
}

export const jobNotices: JupyterFrontEndPlugin<void> = {
  id: 'gpuspawner-lab:job-notices',
  description: "A notice when one of the user's GPU jobs ends or gives way.",
  autoStart: true,
  activate: (app: JupyterFrontEnd) => {
    const settings = ServerConnection.makeSettings();
    const notices = new Notices(app);
    const poll: Poll = new Poll({
      name: jobNotices.id,
      factory: async () => {
        let jobs: IJob[] | null;
        try {
          jobs = await readJobs(settings);
        } catch (error) {
          poll.frequency = { ...poll.frequency, interval: RETRY_INTERVAL };
          throw error; // the poll backs off from RETRY_INTERVAL
        }
        if (jobs === null) {
          poll.dispose();
          return;
        }
        notices.update(jobs);
        poll.frequency = { ...poll.frequency, interval: INTERVAL };
      },
      frequency: { interval: INTERVAL, backoff: true, max: 300_000 },
      standby: 'when-hidden'
    });
  }
};
