/**
 * gpuspawner in JupyterLab: which GPUs this server holds and how long they stay.
 *
 * The hub owns the lease; this plugin only shows what the notebook server's
 * /gpuspawner/lease route brings back from it (see gpuspawner_lab/handlers.py):
 * a status bar item, the details when it is clicked, and a warning before a
 * policy stops the server. Every sentence comes from the hub, so users read the
 * same words here as on the spawn page; the hub also says when to ask again.
 * Beside it, jobs.ts: a notice when one of the user's GPU jobs ends or gives way.
 */
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { jobNotices } from './jobs';

interface IGPU {
  uuid: string;
  index: number;
  model: string;
  name?: string; // "GPU 2 · MIG 1g.10gb #3", "GPU 3 · slot 2 of 4" (hubs with slices)
  label?: string; // what it is: model, kind and memory
}

interface ILimit {
  key: string;
  says: string;
}

interface IWarning {
  key: string;
  stops_at: string;
  says: string;
}

interface IResidency {
  state: 'resident' | 'parked' | 'restoring';
  lent: boolean; // parked, and a job runs on its GPU meanwhile
  turn?: boolean; // parked for the other person's turn on a GPU shared in turns
  shared?: boolean; // on its GPU, which it shares in turns with a parked person
  says: string;
}

interface ILease {
  summary: string;
  residency?: IResidency;
  profile: { slug: string; display_name: string } | null;
  gpus: IGPU[];
  limits: ILimit[];
  warning: IWarning | null;
  refresh_seconds: number;
}

const DEFAULT_INTERVAL = 30_000;
// After a failed read the poll asks again this soon, then backs off (a hub slow for a moment
// must not leave "unknown" in the status bar for the 30 s to 90 s of DEFAULT_INTERVAL's backoff).
const RETRY_INTERVAL = 5_000;

async function readLease(
  settings: ServerConnection.ISettings
): Promise<ILease | null> {
  const url = URLExt.join(settings.baseUrl, 'gpuspawner', 'lease');
  const response = await ServerConnection.makeRequest(url, {}, settings);
  if (response.status === 404) {
    return null; // not a gpuspawner server: nothing to show
  }
  const body = await response.json();
  if (!response.ok) {
    throw new Error(body.message || response.statusText);
  }
  return body as ILease;
}

function details(lease: ILease): string[] {
  const lines: string[] = [];
  if (lease.profile) {
    lines.push(`Profile: ${lease.profile.display_name}`);
  }
  for (const gpu of lease.gpus) {
    const name = gpu.name ?? `GPU ${gpu.index}`;
    lines.push(`${name}: ${gpu.label ?? gpu.model}, ${gpu.uuid}`);
  }
  if (lease.residency?.says) {
    lines.push(lease.residency.says);
  }
  return lines.concat(lease.limits.map(limit => limit.says));
}

/** Where the server's GPU work is, in front of the summary: parked work waits in host memory
 * while a job runs on the GPU (docs/parking.md). */
function residencyLabel(lease: ILease): string {
  switch (lease.residency?.state) {
    case 'parked':
      if (lease.residency.lent) {
        return 'GPU parked (a job runs on it meanwhile) · ';
      }
      return lease.residency.turn
        ? "GPU parked (the other person's turn) · "
        : 'GPU parked · ';
    case 'restoring':
      return 'GPU restoring · ';
    default:
      return lease.residency?.shared ? 'GPU shared in turns · ' : '';
  }
}

/** The status bar item: the summary, and every detail on click. */
class LeaseItem extends Widget {
  constructor() {
    super();
    this.id = 'gpuspawner-lease';
    this.addClass('jp-gpuspawner-lease');
    this.node.addEventListener('click', () => void this.open());
    this.hide();
  }

  display(lease: ILease | null): void {
    this.lease = lease;
    if (lease === null) {
      this.hide();
      return;
    }
    this.node.textContent = residencyLabel(lease) + lease.summary;
    this.node.title = details(lease).join('\n');
    this.toggleClass('jp-gpuspawner-warning', lease.warning !== null);
    this.show();
  }

  fail(reason: string): void {
    this.node.textContent = 'GPU lease: unknown';
    this.node.title = reason;
    this.show();
  }

  private async open(): Promise<void> {
    if (this.lease === null) {
      return;
    }
    const body = new Widget();
    body.addClass('jp-gpuspawner-details');
    for (const line of details(this.lease)) {
      const p = document.createElement('p');
      p.textContent = line;
      body.node.appendChild(p);
    }
    await showDialog({
      title: 'Your server',
      body,
      buttons: [Dialog.okButton()]
    });
  }

  private lease: ILease | null = null;
}

/** One notification per warning: shown when it starts, gone when it no longer applies. */
class Warnings {
  show(warning: IWarning | null): void {
    const key = warning ? `${warning.key} ${warning.stops_at}` : null;
    if (key === this.key) {
      return;
    }
    if (this.id !== null) {
      Notification.dismiss(this.id);
      this.id = null;
    }
    this.key = key;
    if (warning) {
      this.id = Notification.warning(warning.says, { autoClose: false });
    }
  }

  private key: string | null = null;
  private id: string | null = null;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'gpuspawner-lab:lease',
  description: "This server's GPUs and the time left before each limit.",
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null) => {
    const settings = ServerConnection.makeSettings();
    const item = new LeaseItem();
    const warnings = new Warnings();
    if (statusBar) {
      statusBar.registerStatusItem(plugin.id, { item, align: 'left', rank: 100 });
    }
    const poll: Poll = new Poll({
      name: plugin.id,
      factory: async () => {
        let lease: ILease | null;
        try {
          lease = await readLease(settings);
        } catch (error) {
          item.fail(String(error));
          poll.frequency = { ...poll.frequency, interval: RETRY_INTERVAL };
          throw error; // the poll backs off from RETRY_INTERVAL
        }
        item.display(lease);
        warnings.show(lease ? lease.warning : null);
        if (lease === null) {
          poll.dispose();
          return;
        }
        const seconds = Math.min(Math.max(lease.refresh_seconds, 1), 300);
        const interval = seconds * 1000;
        poll.frequency = { ...poll.frequency, interval };
      },
      frequency: { interval: DEFAULT_INTERVAL, backoff: true, max: 300_000 },
      standby: 'when-hidden'
    });
  }
};

export default [plugin, jobNotices];
